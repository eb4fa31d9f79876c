"""`tvmgen inspect` and `tvmgen run`: what an artifact holds, and running it here."""

from __future__ import annotations

import json
import os
import struct
import zipfile
from pathlib import Path

import click
import numpy as np

from tvmgen.commands import options
from tvmgen.core import binfmt
from tvmgen.core import log as logs
from tvmgen.core.latency import Latency
from tvmgen.runtime import runner, sequence

console = logs.console


@click.command()
@click.argument("artifact_dir", type=click.Path(path_type=Path))
@click.option("--json", "as_json", is_flag=True, help="Print the manifest (and the memory figures) as JSON.")
@click.option("--size", is_flag=True, help="Show what makes the library big: weights by tensor, code by kernel.")
def inspect(artifact_dir, as_json, size):
    """Show what an artifact directory holds (its manifest) and the memory it needs.

    Given a .so, .apk or .aar instead: whether each native library is ready for Android's 16 KB
    pages (its LOAD segments' alignment and, inside an archive, where it is stored); exit 2 if not.
    """
    from rich.table import Table

    from tvmgen.core import artifact, kernel_table
    from tvmgen.reports import memory

    if artifact_dir.is_file():
        _inspect_pages(artifact_dir, as_json)
        return
    m = artifact.load(artifact_dir)
    footprint = memory.footprint(artifact_dir, m)
    growth = memory.folded_growth(kernel_table.load(artifact_dir), footprint["weights_bytes"])
    sizes = memory.size_report(artifact_dir, m) if size else None
    if as_json:
        click.echo(
            json.dumps(
                {**m.to_json(), "memory": footprint, "weights_growth": growth, **({"size": sizes} if sizes else {})},
                indent=2,
            )
        )
        return
    out = logs.Console(highlight=False)
    t = Table(title=f"artifact {artifact_dir}", show_header=False, title_justify="left")
    t.add_column(style="bold")
    t.add_column()
    t.add_row("model", f"{m.model.get('name')} ({m.model.get('format')})  {m.model.get('source', '')}")
    t.add_row("platform", f"{m.platform}  (ABI {m.abi}, {m.arch})")
    t.add_row("device", m.device)
    t.add_row("target", json.dumps(m.target))
    t.add_row(
        "export", f"{m.export['kind']}: {m.export['library']}" + ("  system-lib" if m.export.get("system_lib") else "")
    )
    for s in m.inputs:
        t.add_row("input", str(s))
    for s in m.outputs:
        t.add_row("output", str(s))
    for st in m.state:
        shape = "x".join(map(str, st["shape"])) or "scalar"
        t.add_row(
            "state",
            f"{st['input']} -> {st['output']} ({shape} {st['dtype']}), from {st['initial'] or 'zeros'}: held by the runtime",
        )
    t.add_row("weights", f"{m.params['count']} tensors in {m.params['file']}" if m.params else "inside the library")
    library = Path(artifact_dir) / m.export["library"]
    if m.platform.startswith("android") and library.suffix == ".so":
        t.add_row("16 KB pages", binfmt.page_report(library).summary())
    for name, need in m.runtime_needs.items():  # e.g. NNAPI: TVM's NNAPI runtime on the phone
        t.add_row(
            "needs",
            f"{name}: {need.get('library')} ({need.get('tvm_build_option')}), "
            f"{need.get('system_library')}, Android API {need.get('min_android_api')}+",
        )
    t.add_row("versions", ", ".join(f"{k} {v}" for k, v in m.versions.items()))
    for name, info in m.files.items():
        t.add_row("file", f"{name}  {info['bytes']:,} bytes  sha256 {info['sha256'][:16]}…")
    t.add_row("created", m.created)
    for label, value in _memory_rows(footprint, growth):
        t.add_row(label, value)
    out.print(t)
    if sizes:
        _print_sizes(sizes)


def _inspect_pages(path: Path, as_json: bool) -> None:
    """The 16 KB page check of one library or of every library in an APK / AAR."""
    from tvmgen.core.errors import InputError

    try:
        reports = [binfmt.page_report(path)] if path.suffix == ".so" else binfmt.archive_page_reports(path)
    except (ValueError, zipfile.BadZipFile, struct.error) as e:
        raise InputError(f"{path} is not an ELF library, an APK or an AAR ({e})", "pass a .so, .apk or .aar") from e
    if as_json:
        rows = [
            {
                "name": r.name,
                "arch": r.arch,
                "p_align": [s.align for s in r.segments],
                "zip_offset": r.zip_offset,
                "compressed": r.compressed,
                "ready_16k": r.ok,
            }
            for r in reports
        ]
        click.echo(json.dumps({"file": str(path), "libraries": rows}, indent=2))
    else:
        for r in reports:
            click.echo(r.summary())
        if not reports:
            click.echo(f"{path}: no native libraries")
    bad = [r for r in reports if not r.ok]
    if bad:
        raise InputError(
            f"{len(bad)} of {len(reports)} native libraries in {path.name} are not ready for 16 KB pages: "
            + ", ".join(r.name for r in bad),
            "link with -Wl,-z,max-page-size=16384 (NDK r27: -DANDROID_SUPPORT_FLEXIBLE_PAGE_SIZES=ON; r28+ by default); "
            "in an APK keep libraries uncompressed and aligned with zipalign -P 16 (build-tools 35+) or AGP 8.5.1+",
        )


def _mb(n) -> str:
    return "not recorded (compiled by an older tvmgen)" if n is None else f"{n / 1e6:.2f} MB ({n:,} bytes)"


def _memory_rows(f: dict, growth: dict | None) -> list[tuple[str, str]]:
    rows = [
        ("weight bytes", f"{_mb(f['weights_bytes'])}, {f['weights_in']}"),
        (
            "code",
            f"{_mb(f['code_bytes'])} of machine code in {f['library_bytes']:,} bytes of library"
            if f["code_bytes"] is not None
            else _mb(None),
        ),
        (
            "workspace",
            f"{_mb(f['planned_workspace_bytes'])} planned by the VM for activations"
            + (f" ({f['planned_storages']} storages)" if f["planned_storages"] else ""),
        ),
    ]
    if growth and growth["ratio"] > 1.2:
        rows.append(
            (
                "weights growth",
                f"{growth['ratio']:.1f}x the model file ({growth['model_file_bytes'] / 1e6:.2f} "
                "MB): fp16 weights become fp32 when TVM folds their casts (or TFLite's DEQUANTIZE); "
                "compile with --separate-params to keep them fp16 in model.params (cast as the model runs)",
            )
        )
    return rows


def _print_sizes(sizes: dict, top: int = 15) -> None:
    click.echo(f"\nweights by tensor ({len(sizes['weights'])} tensors, {sizes['weights_total']:,} bytes)")
    for w in sizes["weights"][:top]:
        click.echo(
            f"  {w['bytes']:>12,}  {w['bytes'] / max(sizes['weights_total'], 1):>6.1%}  {w['dtype']:<8} "
            f"{tuple(w['shape'])!s:<18} {w['name']}"
        )
    if len(sizes["weights"]) > top:
        click.echo(
            f"  ... {len(sizes['weights']) - top} more: {sum(w['bytes'] for w in sizes['weights'][top:]):,} bytes"
        )
    if not sizes["recorded"]:
        click.echo("  (weights by tensor need kernels.json: compile the model again with this tvmgen)")
    click.echo(f"\ncode by kernel ({len(sizes['code'])} functions, {sizes['code_total']:,} bytes)")
    for k in sizes["code"][:top]:
        click.echo(f"  {k['bytes']:>12,}  {k['bytes'] / max(sizes['code_total'], 1):>6.1%}  {k['kernel']}")
    if len(sizes["code"]) > top:
        click.echo(f"  ... {len(sizes['code']) - top} more: {sum(k['bytes'] for k in sizes['code'][top:]):,} bytes")


@click.command()
@click.argument("artifact_dir", type=click.Path(path_type=Path))
@click.option(
    "-i",
    "--input",
    "input_files",
    multiple=True,
    metavar="[NAME=]FILE.npy",
    help="An input as .npy; NAME= may be left out when given in the model's input order. "
    "Inputs not given are seeded random.",
)
@click.option(
    "-o",
    "--output-dir",
    type=click.Path(path_type=Path),
    help="Write each output as NAME.npy here (with --sequence: STEP/NAME.npy, one folder per step).",
)
@click.option(
    "--sequence",
    "sequence_dir",
    type=click.Path(path_type=Path),
    metavar="DIR",
    help="Run a sequence of steps in order, from a fresh state: DIR/000000/, DIR/000001/, ... each holding "
    "NAME.npy per input (the state inputs are the runtime's). Prints per-step latency (median, p90, max).",
)
@click.option("--repeat", default=10, show_default=True, help="Timed runs after the first.")
@options.seed("Seed for inputs not given.")
@click.option(
    "--threads",
    type=click.IntRange(min=1),
    help="CPU threads for parallel kernels. [default: $TVM_NUM_THREADS, else one per big core]",
)
@click.option("--json", "as_json", is_flag=True, help="Print timings and output summaries as JSON.")
@click.option(
    "--vm",
    "vm_only",
    is_flag=True,
    help="Run every call on the Relax VM. By default a CPU model whose main is one straight line of kernel "
    "calls runs them directly from its second run (as tvmgen-run does; --json's executor says which ran).",
)
@click.option(
    "--profile",
    is_flag=True,
    help="Also time each kernel (--repeat runs with the VM's instrument hook): a table per kernel and kind.",
)
@click.option(
    "--plot",
    "plot_path",
    type=click.Path(path_type=Path),
    help="With --profile: a bar chart of the slowest kernels (PNG) here.",
)
@click.option(
    "--check",
    is_flag=True,
    help="Also run the source model in its reference runtime (onnxruntime, LiteRT, PyTorch) on the same inputs: "
    'max error and top-5 agreement per output (in --json as "check", for tvmgen report).',
)
def run(
    artifact_dir,
    input_files,
    output_dir,
    sequence_dir,
    repeat,
    seed,
    threads,
    as_json,
    vm_only,
    profile,
    plot_path,
    check,
):
    """Run a host artifact with TVM's Relax VM, write outputs, print timings and peak memory.

    A streaming model (compiled with --state, or with resource variables) carries its state from run to run:
    each run is one step. --sequence DIR feeds a sequence of steps in order and saves each step's outputs.
    """
    if threads:  # also for TVM's own pool (older artifacts), which reads it once when it starts
        os.environ["TVM_NUM_THREADS"] = str(threads)
    from tvmgen.compiler.targets.platforms import get_device
    from tvmgen.core import artifact, kernel_table
    from tvmgen.core.errors import InputError
    from tvmgen.core.model import random_inputs
    from tvmgen.reports import memory
    from tvmgen.reports import profile as profiling
    from tvmgen.runtime.runner import HostModel

    if plot_path and not profile:
        raise InputError("--plot draws the per-kernel profile", "add --profile")
    if sequence_dir and (input_files or profile):
        raise InputError(
            f"--sequence gives every step's inputs; {'--input' if input_files else '--profile'} does not go with it",
            "leave it out (run without --sequence to profile)",
        )
    manifest = artifact.load(artifact_dir)
    if check:
        _require_source(manifest)  # before the timed runs, not after
    steps = None
    if sequence_dir:  # every step read and checked before anything runs
        steps = sequence.read_sequence(sequence_dir, manifest.own_inputs, sorted(manifest.state_inputs))
        inputs = steps[0]
    else:
        inputs = runner.read_input_files(input_files, manifest.own_inputs)
        held = [n for n in inputs if n in manifest.state_inputs]
        if held:
            raise InputError(
                f"{', '.join(held)}: a state input, which the runtime holds and feeds itself (from its initial "
                "value, then each run's new value)",
                "leave it out; to run several steps in order use --sequence DIR",
            )
    missing = [s for s in manifest.own_inputs if s.name not in inputs]
    if missing:
        console.print(f"  [dim]seeded random values (seed {seed}) for: {', '.join(s.name for s in missing)}[/]")
        inputs.update(random_inputs(missing, seed))
    import tvm  # noqa: F401 - loaded first: "before load" is then the runtime without the model

    resident = memory.ResidentMemory()
    resident.mark_before_load()
    with logs.step(f"Loading {artifact_dir}"):
        model = HostModel(artifact_dir, threads=threads or 0, direct_calls=not vm_only)
    resident.mark_loaded()
    step_outputs = None
    if steps is not None:
        with logs.step(f"Running {len(steps)} steps in order" + (", state carried" if manifest.state else "")):
            step_outputs = [model.run(x) for x in steps]
        outputs = step_outputs[-1]
    else:
        with logs.step(f"Running {1 + repeat} times" + (", each run a step, state carried" if manifest.state else "")):
            outputs = model.run(inputs, repeat=1 + repeat)
    report = None
    if profile:
        with logs.step(f"Profiling {max(repeat, 1)} runs kernel by kernel"):
            report = profiling.profile_host_model(model, inputs, max(repeat, 1), kernel_table.load(artifact_dir))
    resident.mark_end()
    if output_dir and step_outputs is not None:
        sequence.write_outputs(output_dir, [s.name for s in manifest.own_outputs], step_outputs)
    elif output_dir:
        output_dir.mkdir(parents=True, exist_ok=True)
        for spec, arr in zip(manifest.own_outputs, outputs):
            np.save(output_dir / runner.output_file_name(spec.name), arr)

    summary = {
        "model": manifest.model.get("name"),
        "artifact": str(Path(artifact_dir).resolve()),  # tvmgen report reads its manifest from here
        "threads": model.threads,
        "thread_pool": model.parallel,
        "executor": model.executor,  # "direct calls", or "relax vm: " and why (runtime.direct_calls)
        # how direct calls are made: "one native call" (the library's tvmgen_replay), or "python: " and why
        "replay": model.replayed_by,
        "timings": model.timings.summary(),
        "runs_ms": [round(t, 4) for t in model.timings.runs_ms],  # each timed run: the report's distribution
        "outputs": [
            {
                "name": s.name,
                "shape": list(a.shape),
                "dtype": str(a.dtype),
                "min": float(a.min()),
                "max": float(a.max()),
                "mean": float(a.mean()),
                **({"top5": np.argsort(a.reshape(-1))[::-1][:5].tolist()} if a.ndim == 2 and a.shape[0] == 1 else {}),
            }
            for s, a in zip(manifest.own_outputs, outputs)
        ],
        "memory": resident.to_json(),
        **({"profile": report.to_json()} if report else {}),
        **_streaming(manifest, model, steps, sequence_dir),
    }
    if check:  # after the timings are read: a streaming model's check runs the model again
        summary.update(_check(manifest, model, inputs, outputs, steps, step_outputs, seed))
    if plot_path:
        report.plot(plot_path)
    if as_json:
        click.echo(json.dumps(summary, indent=2))
        return
    tm = summary["timings"]
    console.print(
        f"load {tm['load_ms']:.1f} ms · VM init {tm['init_ms']:.1f} ms · first run {tm['first_run_ms']:.1f} ms "
        f"· median of {tm['runs']} runs [bold]{tm['median_ms']:.2f} ms[/] (min {tm['min_ms']:.2f})"
    )
    if model.executor.startswith("relax vm: ") and get_device(manifest.device).host_memory:  # as tvmgen-run says it
        console.print(f"  [dim]main ran on the {model.executor}[/]")
    _print_streaming(summary)
    for o in summary["outputs"]:
        extra = f" top-5 {o['top5']}" if "top5" in o else ""
        click.echo(
            f"{o['name']}: shape {tuple(o['shape'])} {o['dtype']} min {o['min']:.4g} max {o['max']:.4g} "
            f"mean {o['mean']:.4g}{extra}"
        )
    for c in summary.get("check", []):
        top = (
            f", top-1 {'matches' if c['top1_match'] else 'differs'}, top-5 overlap {c['top5_overlap']}/5"
            if "top1_match" in c
            else ""
        )
        at = f" at step {c['step']} of {c['steps']}" if "step" in c else ""
        click.echo(
            f"{c['name']} vs {summary['reference']}: max abs error {c['max_abs']:.3g}{at} (rel {c['max_rel']:.3g}){top}"
        )
    click.echo(resident.line())
    if report:
        click.echo(report.table())
    if plot_path:
        console.print(f"plot: {plot_path}")
    if output_dir:
        per_step = f" ({len(steps)} step folders)" if steps is not None else ""
        console.print(f"outputs written to {output_dir}/{per_step}")


def _require_source(manifest) -> None:
    from tvmgen.core.errors import InputError

    src = manifest.model.get("source") or ""
    if not (src.startswith("builtin:") or (src and Path(src).exists())):
        raise InputError(
            f"--check runs the source model ({src or 'not recorded'}) in its reference runtime, and it is not here",
            "run where the model file is (the path manifest.json records), or leave out --check",
        )


def _streaming(manifest, model, steps, sequence_dir) -> dict:
    """`run --json`'s record of a sequence (each step's latency) and of a carried state (its pairs)."""
    out: dict = {}
    if manifest.state:
        out["state"] = [{"input": s["input"], "output": s["output"]} for s in manifest.state]
        out["per_step"] = True  # each timed run is one step of a streaming model, the state carried
    if steps is not None:
        step_ms = [model.timings.first_run_ms, *model.timings.runs_ms]
        lat = Latency.from_samples(step_ms)
        out["sequence"] = {
            "dir": str(sequence_dir),
            "steps": len(steps),
            "state_carried": bool(manifest.state),
            "step_ms": [round(t, 4) for t in step_ms],
            **lat.flat(("median", "p90", "max"), "_ms", digits=4),
        }
    return out


def _print_streaming(summary: dict) -> None:
    pairs = ", ".join(f"{s['input']} -> {s['output']}" for s in summary.get("state", []))
    seq = summary.get("sequence")
    if seq:
        carried = f", state carried ({pairs})" if pairs else " (no state: each step independent of the others)"
        console.print(
            f"{seq['steps']} steps in order{carried}: per step median [bold]{seq['median_ms']:.3f} ms[/], "
            f"p90 {seq['p90_ms']:.3f}, max {seq['max_ms']:.3f} (step 0, the first run: {seq['step_ms'][0]:.3f} ms)"
        )
    elif pairs:
        console.print(
            f"state carried ({pairs}): each run is one step from the state the last left (timings per step); "
            "the outputs are the last step's"
        )


def _check(manifest, model, inputs: dict, outputs: list, steps, step_outputs, seed: int) -> dict:
    """--check: the source model's reference runtime on the same inputs; max error and top-5 agreement. A
    sequence: every step compared (each output's worst step). A streaming model run without --sequence:
    STEPS_CHECKED seeded steps in order from a fresh state through the artifact and the reference."""
    import tempfile

    from tvmgen.core.errors import InputError
    from tvmgen.reports import agreement
    from tvmgen.runtime import check
    from tvmgen.runtime.sequence import compare_steps, reference_steps, seeded_steps

    with tempfile.TemporaryDirectory(prefix="tvmgen-reference-") as scratch:
        imported = check.artifact_model(manifest, Path(scratch))
        if imported is None:
            raise InputError(
                f"--check cannot import the source model {manifest.model.get('source')} (the reason is above)",
                "leave out --check",
            )
        name = imported.reference_name
        if steps is None and not manifest.state:
            with logs.step(f"Running {name} on the same inputs"):
                expected = imported.reference(inputs)
            rows = agreement.compare_arrays(outputs, expected, [s.name for s in manifest.outputs])
            return {"check": rows, "reference": f"{name} on the host, same inputs"}
        which = "the same"
        if steps is None:  # the timed runs were steps of one input: check a sequence of different ones
            which = "seeded"
            steps = seeded_steps(manifest.own_inputs, seed)
            model.reset_state()
            step_outputs = [model.run(x) for x in steps]
        carried = ", state carried on both sides" if manifest.state else ""
        with logs.step(f"Running {name} on {which} {len(steps)} steps in order{carried}"):
            if manifest.state:
                expected_steps = reference_steps(imported)(steps)
            else:
                expected_steps = [imported.reference(x) for x in steps]
    rtol, atol = check.tolerances(manifest.precision)
    rows = compare_steps(step_outputs, expected_steps, [s.name for s in manifest.own_outputs], rtol, atol)
    start = " from the initial state, state carried" if manifest.state else ""
    return {"check": rows, "reference": f"{name} on the host, {which} {len(steps)} steps in order{start}"}
