"""`tvmgen inspect` and `tvmgen run`: what an artifact holds, and running it here."""

from __future__ import annotations

import json
import os
from pathlib import Path

import click
import numpy as np

from tvmgen import log as logs, runner

console = logs.console


@click.command()
@click.argument("artifact_dir", type=click.Path(path_type=Path))
@click.option("--json", "as_json", is_flag=True, help="Print the manifest as JSON.")
def inspect(artifact_dir, as_json):
    """Show what an artifact directory holds (its manifest)."""
    from rich.table import Table

    from tvmgen import artifact

    m = artifact.load(artifact_dir)
    if as_json:
        click.echo(json.dumps(m.to_json(), indent=2))
        return
    out = logs.Console(highlight=False)
    t = Table(title=f"artifact {artifact_dir}", show_header=False, title_justify="left")
    t.add_column(style="bold")
    t.add_column()
    t.add_row("model", f"{m.model.get('name')} ({m.model.get('format')})  {m.model.get('source', '')}")
    t.add_row("platform", f"{m.platform}  (ABI {m.abi}, {m.arch})")
    t.add_row("device", m.device)
    t.add_row("target", json.dumps(m.target))
    t.add_row("export", f"{m.export['kind']}: {m.export['library']}"
              + ("  system-lib" if m.export.get("system_lib") else ""))
    for s in m.inputs:
        t.add_row("input", str(s))
    for s in m.outputs:
        t.add_row("output", str(s))
    t.add_row("weights", f"{m.params['count']} tensors in {m.params['file']}" if m.params else "inside the library")
    for name, need in m.runtime_needs.items():  # e.g. NNAPI: TVM's NNAPI runtime on the phone
        t.add_row("needs", f"{name}: {need.get('library')} ({need.get('tvm_build_option')}), "
                           f"{need.get('system_library')}, Android API {need.get('min_android_api')}+")
    t.add_row("versions", ", ".join(f"{k} {v}" for k, v in m.versions.items()))
    for name, info in m.files.items():
        t.add_row("file", f"{name}  {info['bytes']:,} bytes  sha256 {info['sha256'][:16]}…")
    t.add_row("created", m.created)
    out.print(t)


@click.command()
@click.argument("artifact_dir", type=click.Path(path_type=Path))
@click.option("-i", "--input", "input_files", multiple=True, metavar="[NAME=]FILE.npy",
              help="An input as .npy; NAME= may be left out when given in the model's input order. "
                   "Inputs not given are seeded random.")
@click.option("-o", "--output-dir", type=click.Path(path_type=Path), help="Write each output as NAME.npy here.")
@click.option("--repeat", default=10, show_default=True, help="Timed runs after the first.")
@click.option("--seed", default=0, show_default=True, help="Seed for inputs not given.")
@click.option("--threads", type=click.IntRange(min=1), help="CPU threads for TVM's thread pool. [default: TVM's choice]")
@click.option("--json", "as_json", is_flag=True, help="Print timings and output summaries as JSON.")
def run(artifact_dir, input_files, output_dir, repeat, seed, threads, as_json):
    """Run a host artifact with TVM's Relax VM, write outputs, print timings."""
    if threads:  # read once, when TVM's thread pool starts: set before TVM is loaded
        os.environ["TVM_NUM_THREADS"] = str(threads)
    from tvmgen import artifact
    from tvmgen.frontends.base import random_inputs
    from tvmgen.runner import HostModel

    manifest = artifact.load(artifact_dir)
    inputs = runner.read_input_files(input_files, manifest.inputs)
    missing = [s for s in manifest.inputs if s.name not in inputs]
    if missing:
        console.print(f"  [dim]seeded random values (seed {seed}) for: {', '.join(s.name for s in missing)}[/]")
        inputs.update(random_inputs(missing, seed))
    with logs.step(f"Loading {artifact_dir}"):
        model = HostModel(artifact_dir)
    with logs.step(f"Running {1 + repeat} times"):
        outputs = model.run(inputs, repeat=1 + repeat)
    if output_dir:
        output_dir.mkdir(parents=True, exist_ok=True)
        for spec, arr in zip(manifest.outputs, outputs):
            np.save(output_dir / f"{_safe(spec.name)}.npy", arr)
    import tvm

    summary = {
        "threads": int(tvm.get_global_func("runtime.NumThreads")()),
        "timings": model.timings.summary(),
        "outputs": [{"name": s.name, "shape": list(a.shape), "dtype": str(a.dtype),
                     "min": float(a.min()), "max": float(a.max()), "mean": float(a.mean()),
                     **({"top5": np.argsort(a.reshape(-1))[::-1][:5].tolist()} if a.ndim == 2 and a.shape[0] == 1 else {})}
                    for s, a in zip(manifest.outputs, outputs)],
    }
    if as_json:
        click.echo(json.dumps(summary, indent=2))
        return
    tm = summary["timings"]
    console.print(f"load {tm['load_ms']:.1f} ms · VM init {tm['init_ms']:.1f} ms · first run {tm['first_run_ms']:.1f} ms "
                  f"· median of {tm['runs']} runs [bold]{tm['median_ms']:.2f} ms[/] (min {tm['min_ms']:.2f})")
    for o in summary["outputs"]:
        extra = f" top-5 {o['top5']}" if "top5" in o else ""
        click.echo(f"{o['name']}: shape {tuple(o['shape'])} {o['dtype']} min {o['min']:.4g} max {o['max']:.4g} "
                   f"mean {o['mean']:.4g}{extra}")
    if output_dir:
        console.print(f"outputs written to {output_dir}/")


def _safe(name: str) -> str:
    return "".join(c if c.isalnum() or c in "-_." else "_" for c in name)
