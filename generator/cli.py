"""The tvmgen command line."""

from __future__ import annotations

import json
import logging
import os
import sys
import tempfile
import traceback
from pathlib import Path

import click
import numpy as np

from tvmgen import __version__, log as logs
from tvmgen.errors import CheckError, InputError, ToolMissingError, TvmgenError

log = logging.getLogger("tvmgen")
console = logs.console


class State:
    verbosity = 0
    log_path: Path | None = None


@click.group(context_settings={"help_option_names": ["-h", "--help"], "max_content_width": 100})
@click.version_option(__version__, "--version", prog_name="tvmgen",
                      message="%(prog)s %(version)s")
@click.option("-v", "--verbose", count=True, help="More output: -v steps, -vv debug (also in the log file).")
@click.pass_context
def cli(ctx, verbose):
    """tvmgen: put a deep-learning model on a phone with Apache TVM.

    \b
    Quick start:
      tvmgen compile builtin:mobilenet --check       compile the built-in model for this machine
      tvmgen run out/mobilenet-host-cpu              run it and time it
      tvmgen inspect out/mobilenet-host-cpu          show what the artifact holds

    \b
    On a phone:
      tvmgen doctor                                  which Android tools are here, and the fix for the rest
      tvmgen app --model mobilenet.pb --device opencl            model -> signed APK (where the SDK/NDK are)
      tvmgen rpc tracker --detach; tvmgen bench MODEL --key K --tracker 127.0.0.1:9190

    Every run writes a log file; its path is printed when something fails.
    """
    State.verbosity = verbose
    State.log_path = logs.setup(verbose, ctx.invoked_subcommand or "tvmgen")


# --------------------------------------------------------------------------- compile

def _default_out(model: str, platform: str, device: str) -> Path:
    stem = model.split(":", 1)[1] if model.startswith("builtin:") else Path(model).stem
    return Path("out") / f"{stem}-{platform}-{device}"


@cli.command()
@click.argument("model_arg", metavar="MODEL", required=False)
@click.option("--model", "model_opt", metavar="MODEL", help="The model (same as the MODEL argument).")
@click.option("--platform", "--target", "platform", default="host", show_default=True,
              help="Where the model runs: host, linux-aarch64, android-arm64, android-armv7, "
                   "android-x86_64, ios-arm64. (--target is an alias.)")
@click.option("--device", default="cpu", show_default=True,
              type=click.Choice(["cpu", "opencl", "metal", "cuda", "nnapi"]),
              help="Processor on the platform that runs the model.")
@click.option("--gpu-family", default="generic", show_default=True,
              type=click.Choice(["adreno", "mali", "generic"]), help="OpenCL GPU family (with --device opencl).")
@click.option("--input", "input_flags", multiple=True, metavar="NAME:SHAPE[:DTYPE]",
              help="Set or override an input's shape/dtype, e.g. input:1x224x224x3:float32. Repeatable.")
@click.option("--inputs", "tf_inputs", metavar="NAMES", help="TensorFlow: comma-separated input node names.")
@click.option("--outputs", "tf_outputs", metavar="NAMES", help="TensorFlow: comma-separated output node names.")
@click.option("-o", "--out", type=click.Path(path_type=Path),
              help="Artifact directory to write. [default: out/<model>-<platform>-<device>]")
@click.option("--force", is_flag=True, help="Replace the output directory if it exists.")
@click.option("--separate-params", is_flag=True, help="Write weights to model.params instead of into the library.")
@click.option("--objects-only", is_flag=True,
              help="Write an object archive (model.tar) for the app build to link, instead of linking here.")
@click.option("--check", is_flag=True, help="Compare outputs with the reference runtime on seeded random inputs.")
@click.option("--rtol", default=1e-3, show_default=True, help="--check: tolerance relative to the largest reference value.")
@click.option("--atol", default=1e-4, show_default=True, help="--check: absolute tolerance.")
@click.option("--seed", default=0, show_default=True, help="--check: seed for the random inputs.")
@click.option("--schedules", "schedules", default="default", show_default=True, type=click.Choice(["default", "none"]),
              help="CPU kernels: tvmgen's default schedules (tiled, vectorised, parallel), or none: TVM's "
                   "own lowering (correct but many times slower; to rule out a scheduling problem).")
@click.option("--cpu-features", metavar="+F[,+F...]",
              help="Extra LLVM CPU features the compiled code may use, e.g. +dotprod: Arm's 8-bit dot product "
                   "(Cortex-A55/A75 and later), which 8-bit matmuls then run on. The library then needs a CPU that "
                   "has them. The host's own features are always used unless --cpu names another CPU.")
@click.option("--cpu", "cpu_name", metavar="NAME",
              help="The CPU (LLVM's name) the code is built for: its vector width and instructions. Default: this "
                   "machine's CPU for --platform host (code that may not run on an older CPU), a generic NEON CPU for "
                   "Arm platforms. E.g. haswell or x86-64-v3 (any AVX2 machine), skylake-avx512, cortex-a76.")
@click.option("--tuning-db", type=click.Path(path_type=Path),
              help="CPU kernels tuned by `tvmgen tune` (its --db root): used where the database has them.")
@click.option("--strategy", default="patterns", show_default=True, type=click.Choice(["patterns", "cost"]),
              help="--device nnapi: how to place operators (as for `tvmgen partition`).")
@click.option("--feature-level", type=click.IntRange(1, 8), help="--device nnapi: highest NNAPI feature level.")
@click.option("--cost-table", type=click.Path(path_type=Path), help="--device nnapi --strategy cost: JSON cost table.")
def compile(model_arg, model_opt, platform, device, gpu_family, input_flags, tf_inputs, tf_outputs,
            out, force, separate_params, objects_only, check, rtol, atol, seed, schedules="default", tuning_db=None,
            strategy="patterns", feature_level=None, cost_table=None, cpu_features=None, cpu_name=None):
    """Compile MODEL into an artifact directory (library + manifest.json).

    MODEL is an .onnx, .tflite, .pt2 (torch.export) or .pb (TensorFlow frozen graph) file,
    a TensorFlow SavedModel directory, or builtin:mobilenet.

    \b
    Examples:
      tvmgen compile builtin:mobilenet --check
      tvmgen compile model.onnx --platform android-arm64 --device opencl --gpu-family adreno
      tvmgen compile mobilenet.pb --input input:1x224x224x3:float32 --platform linux-aarch64
      tvmgen compile model-int8.onnx --platform android-arm64 --cpu-features +dotprod
    """
    from tvmgen import builtin, frontends
    from tvmgen.compiler import build
    from tvmgen.compiler.platforms import check_pair, get_platform
    from tvmgen.frontends.base import InputOverride

    model = model_opt or model_arg
    if model_arg and model_opt and model_arg != model_opt:
        raise InputError("the model is given twice (argument and --model)", "give it once")
    if not model:
        raise InputError("no model given", "tvmgen compile MODEL (try builtin:mobilenet)")
    plat = get_platform(platform)
    check_pair(plat, device)
    if cpu_name:
        plat = plat.with_cpu(cpu_name)
    if cpu_features:
        plat = plat.with_features(cpu_features.split(","))
    overrides = [InputOverride.parse(f) for f in input_flags]
    tuning_db = _tuning_db(tuning_db, plat, device)
    out = out or _default_out(model, platform, device)
    if out.exists() and not force:  # fail before minutes of work, not after
        raise InputError(f"output directory {out} already exists", "pass --force to replace it, or choose another --out")

    with tempfile.TemporaryDirectory(prefix="tvmgen-") as scratch:
        if model.startswith("builtin:"):
            model_path = builtin.materialize(model, Path(scratch))
        else:
            model_path = Path(model)
        with logs.step(f"Importing {model_path.name if not model.startswith('builtin:') else model}"):
            imported = frontends.load(model_path, overrides,
                                      input_names=_split(tf_inputs), output_names=_split(tf_outputs))
        for note in imported.notes:
            console.print(f"  [dim]{note}[/]")
        model_info = {
            "name": model.split(":", 1)[1] if model.startswith("builtin:") else model_path.stem,
            "source": model if model.startswith("builtin:") else str(model_path.resolve()),
            "format": imported.format,
            "sha256": _hash_model(model_path),
        }
        to_build, needs = imported, None
        if device == "nnapi":
            if separate_params:
                raise InputError("--separate-params does not apply to --device nnapi: the NNAPI parts take the "
                                 "weights as constants", "leave out --separate-params")
            to_build, needs = _nnapi_generate(imported, feature_level, strategy, cost_table)
        opts = build.BuildOptions(plat, device, gpu_family, separate_params, objects_only, runtime_needs=needs,
                                  schedules=schedules == "default", tuning_db=tuning_db)
        verify = (lambda staged: _check(imported, staged, opts, rtol, atol, seed, scratch)) if check else None
        manifest = build.compile_to_artifact(to_build, opts, out, force, model_info, verify=verify)
        console.print(f"[green]✓[/] artifact: [bold]{out}[/] ({manifest.export['library']}, "
                      f"{_size(out)} total)")
        if manifest.export.get("finish_command"):
            console.print(f"  to link it later: cd {out} && {manifest.export['finish_command']}")


def _nnapi_generate(imported, feature_level, strategy, cost_table):
    """--device nnapi: partition, print the placement, generate the NNAPI parts with TVM's NNAPI code
    generator (or stop with exit 4 naming the TVM build options). Returns the model to build for
    the CPU and what the manifest records the runtime needs."""
    from tvmgen import nnapi

    costs = nnapi.load_costs(cost_table)
    with logs.step(f"Partitioning for NNAPI ({strategy})"):
        partitioned, report = nnapi.partition(imported.mod, imported.params, len(imported.inputs), feature_level,
                                              strategy, costs)
    console.print(nnapi.format_report(report))
    with logs.step("Generating the NNAPI parts (relax.ext.nnapi)"):
        generated = nnapi.generate(imported, partitioned, report)
    return generated, nnapi.runtime_needs(report)


def _check(imported, staged: Path, opts, rtol, atol, seed, scratch):
    """Compare with the reference runtime; raising here keeps the artifact from being written."""
    from tvmgen.compiler import build
    from tvmgen.compiler.platforms import PLATFORMS
    from tvmgen.frontends.base import random_inputs
    from tvmgen.runner import HostModel, compare

    from tvmgen.compiler.platforms import missing_cpu_features, target_dict

    host_dir = staged
    if opts.platform.name != "host" or opts.device not in ("cpu", "cuda") or \
            missing_cpu_features(target_dict(opts.platform, opts.device)):
        # The artifact cannot run here: check the same imported module built for this machine.
        host_dir = Path(scratch) / "host-check"
        console.print(f"  [dim]{opts.platform.name}/{opts.device} ({opts.platform.cpu_target().get('mcpu', 'generic')}) cannot run here; "
                      "checking a host/cpu build of the same model[/]")
        host_opts = build.BuildOptions(PLATFORMS["host"], "cpu", separate_params=opts.separate_params)
        build.compile_to_artifact(imported, host_opts, host_dir, True, {"name": "check"})
    inputs = random_inputs(imported.inputs, seed)
    with logs.step(f"Checking against {imported.reference_name}"):
        actual = HostModel(host_dir).run(inputs)
        expected = imported.reference(inputs)
    rows = compare(actual, expected, imported.output_names)
    failed = []
    for r in rows:
        if "shape_mismatch" in r:
            failed.append(f"{r['name']}: shape {r['shape_mismatch']}")
            continue
        limit = atol + rtol * r["ref_max"]
        ok = r["max_abs"] <= limit
        console.print(f"  {'[green]ok[/]' if ok else '[red]FAIL[/]'} {r['name']}: max abs error {r['max_abs']:.3g}, "
                      f"max rel error {r['max_rel']:.3g} (tolerance: atol {atol:g} + rtol {rtol:g})")
        if not ok:
            failed.append(r["name"])
    if len(actual) != len(expected):
        failed.append(f"TVM gave {len(actual)} outputs, the reference {len(expected)}")
    if failed:
        raise CheckError(f"outputs differ from {imported.reference_name} beyond tolerance: {', '.join(failed)}; "
                         "no artifact was written",
                         "this is a compiler bug or a precision issue; raise --atol/--rtol only if the error is expected")


# --------------------------------------------------------------------------- inspect

@cli.command()
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


# --------------------------------------------------------------------------- run

@cli.command()
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
    inputs = _read_inputs(input_files, manifest.inputs)
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


def _read_inputs(flags, specs) -> dict[str, np.ndarray]:
    names = [s.name for s in specs]
    inputs = {}
    for i, flag in enumerate(flags):
        name, sep, path = flag.rpartition("=")
        if not sep:
            if i >= len(names):
                raise InputError(f"more --input files ({len(flags)}) than model inputs ({len(names)})",
                                 f"the model's inputs are: {', '.join(names)}")
            name, path = names[i], flag
        p = Path(path)
        if not p.is_file():
            raise InputError(f"input file {p} does not exist", "pass an existing .npy file")
        try:
            inputs[name] = np.load(p, allow_pickle=False)
        except Exception as e:
            raise InputError(f"cannot read {p} as .npy ({e})", "save inputs with numpy.save") from e
    return inputs


# --------------------------------------------------------------------------- runtime / embed

@cli.group()
def runtime():
    """Build the device runtime (libtvmgen_runtime, tvmgen-run, JNI bridge) from jni/."""


@runtime.command("build")
@click.option("--platform", default="host", show_default=True, type=click.Choice(["host", "linux-aarch64"]),
              help="Where the runtime runs. Android builds run in the app's Gradle build (NDK + TVM source).")
@click.option("-o", "--out", type=click.Path(path_type=Path), help="Build directory. [default: build/runtime-<platform>]")
def runtime_build_cmd(platform, out):
    """Build the runtime with CMake; prints the install prefix (bin/tvmgen-run, lib/, include/)."""
    from tvmgen import runtime_build

    prefix = runtime_build.build(platform, out or Path("build") / f"runtime-{platform}")
    console.print(f"[green]✓[/] runtime for {platform}: [bold]{prefix}[/]")
    click.echo(prefix)


@cli.command()
@click.argument("source", metavar="ARTIFACT|MODEL")
@click.option("--platform", required=True, type=click.Choice(["android", "linux-aarch64", "host"]),
              help="Where the app runs.")
@click.option("--abi", type=click.Choice(["arm64-v8a", "armeabi-v7a", "x86_64"]),
              help="Android ABI. [default: arm64-v8a]")
@click.option("--device", default="cpu", show_default=True, type=click.Choice(["cpu", "opencl", "cuda"]),
              help="When SOURCE is a model: the device to compile for.")
@click.option("--input", "input_flags", multiple=True, metavar="NAME:SHAPE[:DTYPE]",
              help="When SOURCE is a model: input shapes, as for compile.")
@click.option("-o", "--out", type=click.Path(path_type=Path), required=True, help="Bundle directory to write.")
@click.option("--force", is_flag=True, help="Replace the bundle directory if it exists.")
def embed(source, platform, abi, device, input_flags, out, force):
    """Make a bundle that adds the model and the runtime to an existing app.

    SOURCE is an artifact directory from `tvmgen compile`, or a model file (compiled first).
    The bundle holds the artifact, the runtime libraries and tvmgen-run where they can be built here
    (host, linux-aarch64), else (Android) the runtime sources and the exact build command, the C++
    header, the Java API, a CMake package config and a README with the lines to add to your project.
    """
    from tvmgen import artifact, embed as embedding
    from tvmgen.compiler.platforms import get_platform

    if abi and platform != "android":
        raise InputError("--abi applies to --platform android only", "leave it out for host and linux-aarch64")
    if out.exists() and not force:
        raise InputError(f"output directory {out} already exists", "pass --force to replace it, or choose another --out")
    src = Path(source)
    with tempfile.TemporaryDirectory(prefix="tvmgen-embed-") as scratch:
        scratch = Path(scratch)
        if (src / "manifest.json").is_file():
            artifact_dir = src
            embedding.check_artifact(artifact.load(src), platform, abi)
        else:
            target = embedding.compile_platform(platform, abi)
            artifact_dir = scratch / "artifact"
            objects_only = target.startswith("android")
            if objects_only:
                try:
                    from tvmgen.toolchains import AndroidNdk
                    AndroidNdk(get_platform(target).abi).verify()
                    objects_only = False
                except TvmgenError:
                    console.print("  [dim]no Android NDK here: the bundle gets the object archive (model.tar) "
                                  "and the command that links it[/]")
            ctx = click.get_current_context()
            ctx.invoke(compile, model_arg=source, platform=target, device=device, input_flags=input_flags,
                       out=artifact_dir, force=True, objects_only=objects_only)
        with artifact.staging(out, force) as staged:
            notes = embedding.write_bundle(artifact_dir, platform, abi, staged, scratch / "build")
    for note in notes:
        console.print(f"  [dim]{note}[/]")
    console.print(f"[green]✓[/] bundle: [bold]{out}[/] (see {out}/README.md)")


# --------------------------------------------------------------------------- rpc

@cli.group("rpc")
def rpc_group():
    """Run TVM RPC servers: tracker, proxy, and the native device server.

    \b
    A typical session on one machine:
      tvmgen rpc tracker --detach                     # 127.0.0.1:9190
      tvmgen rpc device --platform linux-aarch64 --key phone --tracker 127.0.0.1:9190 --detach
      tvmgen devices --tracker 127.0.0.1:9190
      tvmgen bench builtin:mobilenet --key phone --tracker 127.0.0.1:9190
      tvmgen rpc stop --all
    """


def _run_or_detach(server, detach: bool, what: str):
    from tvmgen import rpc

    if detach:
        rpc.record(server)
        console.print(f"[green]✓[/] {what} at [bold]{server.address}[/] (pid {server.pid}, log {server.log}); "
                      f"stop it with `tvmgen rpc stop {server.name}`")
        click.echo(server.address)
        return
    console.print(f"[green]✓[/] {what} at [bold]{server.address}[/] (log {server.log}); Ctrl-C stops it")
    click.echo(server.address)
    try:
        while server.alive():
            import time

            time.sleep(0.5)
        raise rpc.RpcError(f"the {server.name} exited", f"see {server.log}")
    except KeyboardInterrupt:
        pass
    finally:
        server.stop()
        console.print(f"stopped the {server.name}")


_host_option = click.option("--host", default="127.0.0.1", show_default=True,
                            help="Address to bind. Loopback unless you give an explicit address.")


@rpc_group.command("tracker")
@_host_option
@click.option("--port", default=9190, show_default=True, help="First port to try.")
@click.option("--port-end", type=int, help="Last port to try. [default: --port + 9]")
@click.option("--detach", is_flag=True, help="Run in the background; `tvmgen rpc stop tracker` stops it.")
def rpc_tracker(host, port, port_end, detach):
    """Start TVM's RPC tracker and wait until it accepts connections."""
    from tvmgen import rpc

    _run_or_detach(rpc.start_tracker(host, port, port_end or port + 9), detach, "RPC tracker")


@rpc_group.command("proxy")
@_host_option
@click.option("--port", default=9090, show_default=True, help="First port to try.")
@click.option("--port-end", type=int, help="Last port to try. [default: --port + 99]")
@click.option("--web-port", default=0, show_default=True, help="The proxy's web page port (0: off).")
@click.option("--tracker", metavar="HOST:PORT", help="Register the proxy's devices with this tracker.")
@click.option("--detach", is_flag=True, help="Run in the background; `tvmgen rpc stop proxy` stops it.")
def rpc_proxy(host, port, port_end, web_port, tracker, detach):
    """Start TVM's RPC proxy (devices and clients both connect to it)."""
    from tvmgen import rpc

    _run_or_detach(rpc.start_proxy(host, port, port_end or port + 99, web_port, tracker), detach, "RPC proxy")


@rpc_group.command("device")
@click.option("--platform", default="host", show_default=True, type=click.Choice(["host", "linux-aarch64"]),
              help="linux-aarch64 runs the cross-built server under qemu-aarch64: the emulated phone CPU.")
@click.option("--key", required=True, help="The key benches ask for.")
@click.option("--proxy", metavar="HOST:PORT", help="Connect to this proxy.")
@click.option("--tracker", metavar="HOST:PORT", help="Register with this tracker (and listen on --host).")
@_host_option
@click.option("--work-dir", type=click.Path(path_type=Path), help="Where uploads land. [default: in the state dir]")
@click.option("--session-timeout", default=600, show_default=True, help="End sessions longer than this (s).")
@click.option("--max-upload-mb", default=512, show_default=True, help="Largest upload accepted.")
@click.option("--detach", is_flag=True, help="Run in the background; `tvmgen rpc stop device-KEY` stops it.")
def rpc_device(platform, key, proxy, tracker, host, work_dir, session_timeout, max_upload_mb, detach):
    """Start the native device server (built from jni/ on first use)."""
    from tvmgen import rpc

    if (proxy is None) == (tracker is None):
        raise InputError("give exactly one of --proxy HOST:PORT or --tracker HOST:PORT")
    server = rpc.start_device(platform, key, proxy=proxy, tracker=tracker, host=host, work_dir=work_dir,
                              session_timeout=session_timeout, max_upload_mb=max_upload_mb)
    _run_or_detach(server, detach, f"{platform} device \"{key}\" connected to {proxy or tracker}")


@rpc_group.command("stop")
@click.argument("names", nargs=-1)
@click.option("--all", "stop_all", is_flag=True, help="Stop every detached server.")
def rpc_stop(names, stop_all):
    """Stop detached servers by name (tracker, proxy, device-KEY), or --all."""
    from tvmgen import rpc

    if not names and not stop_all:
        raise InputError("say which servers to stop", "tvmgen rpc stop tracker proxy device-KEY, or --all")
    stopped = rpc.stop_recorded(list(names) or None)
    for s in stopped:
        console.print(f"stopped the {s.name} ({s.address}, pid {s.pid})")
    missing = [n for n in names if n not in {s.name for s in stopped}]
    if missing:
        raise InputError(f"no running detached server named {', '.join(missing)}", "see `tvmgen rpc list`")


@rpc_group.command("list")
def rpc_list():
    """List the detached servers that are running."""
    from tvmgen import rpc

    for s in rpc.recorded():
        click.echo(f"{s.name}\t{s.address}\tpid {s.pid}\t{s.log}")


@cli.command()
@click.option("--tracker", metavar="HOST:PORT", help="Ask this tracker for its devices.")
def devices(tracker):
    """Devices: keys on a tracker (free/total/pending), and phones on adb."""
    import shutil

    from tvmgen import rpc, toolchains

    if tracker:
        keys = rpc.tracker_summary(tracker)
        click.echo(f"tracker {tracker}:")
        if not keys:
            click.echo("  (no devices)")
        for k, v in sorted(keys.items()):
            click.echo(f"  {k}: {v.get('free', 0)} free of {v.get('total', 0)}, {v.get('pending', 0)} waiting")
    adb = shutil.which("adb")
    if adb:
        out = toolchains.run([adb, "devices", "-l"], check=False)
        click.echo("adb:")
        lines = [ln for ln in out.stdout.splitlines()[1:] if ln.strip()]
        for ln in lines or ["  (no devices)"]:
            click.echo(f"  {ln.strip()}")
    elif not tracker:
        raise InputError("nothing to list: no --tracker given and adb is not installed",
                         "pass --tracker HOST:PORT, or install adb (apt-get install adb)")


# --------------------------------------------------------------------------- bench

@cli.command()
@click.argument("source", metavar="MODEL|ARTIFACT", required=False)
@click.option("--key", required=True, help="The device's key.")
@click.option("--tracker", metavar="HOST:PORT", help="Get the device from this tracker (waits while it is busy).")
@click.option("--proxy", metavar="HOST:PORT", help="Reach the device through this proxy.")
@click.option("--platform", help="Compile for this platform. [default: what the device reports]")
@click.option("--device", default="cpu", show_default=True, type=click.Choice(["cpu", "opencl", "cuda", "metal"]),
              help="Processor on the device (metal: the iOS app, benching the model linked into it).")
@click.option("--input", "input_flags", multiple=True, metavar="NAME:SHAPE[:DTYPE]", help="As for compile.")
@click.option("--gemm", type=click.IntRange(min=1), metavar="N",
              help="Instead of a model: time an N x N x N float32 matmul built for the device (GFLOPS).")
@click.option("--repeat", default=10, show_default=True, help="Timed repeats on the device.")
@click.option("--number", default=1, show_default=True, help="Runs averaged in each repeat.")
@click.option("--min-repeat-ms", default=0, show_default=True, help="Stretch each repeat to at least this long.")
@click.option("--seed", default=0, show_default=True, help="Seed of the inputs (the same on host and device).")
@click.option("--atol", default=1e-4, show_default=True, help="Fail (exit 5) above this error vs the reference...")
@click.option("--rtol", default=1e-3, show_default=True, help="...plus this times the largest reference value.")
@click.option("--session-timeout", default=600, show_default=True, help="Seconds the device gives this session.")
@click.option("--json", "json_path", type=click.Path(path_type=Path), help="Write the results as JSON here.")
@click.option("--plot", "plot_path", type=click.Path(path_type=Path), help="Write a latency histogram (PNG) here.")
@click.option("--usb", is_flag=True, help="The phone reaches the proxy over USB: adb reverse tcp:PORT tcp:PORT first.")
@click.option("--serial", help="--usb: the phone, when several are attached.")
def bench(source, key, tracker, proxy, platform, device, input_flags, gemm, repeat, number, min_repeat_ms, seed,
          atol, rtol, session_timeout, json_path, plot_path, usb, serial):
    """Run and time a model (or --gemm N) on a remote device over TVM RPC.

    Given a model, it is compiled for the device's platform first; given an artifact, its
    architecture must match the device (checked before anything is uploaded). Cold start and
    warm runs are timed on the device, copy-in and copy-out apart, and the outputs compared with
    the reference runtime on the host on the same seeded inputs.

    \b
      tvmgen bench builtin:mobilenet --key phone --tracker 127.0.0.1:9190
      tvmgen bench out/mobilenet-linux-aarch64-cpu --key phone --proxy 127.0.0.1:9090 --json r.json
      tvmgen bench --gemm 1024 --key phone --tracker 127.0.0.1:9190
    """
    from tvmgen import artifact, bench as benching, builtin, frontends
    from tvmgen.compiler import build
    from tvmgen.compiler.platforms import check_pair, get_platform
    from tvmgen.frontends.base import InputOverride

    if (source is None) == (gemm is None):
        raise InputError("give a MODEL or ARTIFACT to bench, or --gemm N", "tvmgen bench builtin:mobilenet --key K ...")
    if usb:
        from tvmgen.android import adb
        from tvmgen.rpc import parse_address

        if not proxy:
            raise InputError("--usb works through a proxy on this machine", "pass --proxy 127.0.0.1:PORT")
        phone = adb.choose_device(serial)
        phone.reverse(parse_address(proxy, "proxy")[1])
        console.print(f"  [dim]{phone.serial} reaches {proxy} over USB (adb reverse)[/]")
    target = benching.Target(key, tracker, proxy, session_timeout)
    with tempfile.TemporaryDirectory(prefix="tvmgen-bench-") as scratch:
        scratch = Path(scratch)
        reference = reference_name = None
        artifact_dir = None
        if source and (Path(source) / "manifest.json").is_file():
            artifact_dir = Path(source)
            manifest = artifact.load(artifact_dir)  # a broken artifact fails here, before any device is taken
            reference, reference_name = _artifact_reference(manifest, scratch)
        elif source:
            model_path = builtin.materialize(source, scratch) if source.startswith("builtin:") else Path(source)
            with logs.step(f"Importing {source}"):
                imported = frontends.load(model_path, [InputOverride.parse(f) for f in input_flags])
            reference, reference_name = imported.reference, imported.reference_name
        with logs.step(f"Connecting to device {key!r} via {'tracker ' + tracker if tracker else 'proxy ' + str(proxy)}"):
            remote, info = benching.connect(target)
        if info:
            console.print(f"  [dim]device: {info.get('platform')} ({info.get('arch')}), devices {info.get('devices')}[/]")
        plat = get_platform(platform or info.get("platform") or "host")
        if gemm:
            check_pair(plat, device)
            report = benching.bench_gemm(remote, info, gemm, plat, device, repeat, number, min_repeat_ms, scratch)
        else:
            if artifact_dir is None:
                artifact_dir = scratch / "artifact"
                build.compile_to_artifact(imported, build.BuildOptions(plat, device), artifact_dir, True,
                                          {"name": model_path.stem, "source": source, "format": imported.format})
            report = benching.bench_model(remote, info, artifact_dir, key, repeat, number, min_repeat_ms, seed,
                                          reference, reference_name)
    benching.print_report(report)
    if json_path:
        json_path.write_text(json.dumps(report.to_json(), indent=2) + "\n")
        console.print(f"results: {json_path}")
    if plot_path:
        benching.plot(report, plot_path)
        console.print(f"plot: {plot_path}")
    bad = [r["name"] for r in report.check or [] if r["max_abs"] > atol + rtol * r["ref_max"]]
    if bad:
        raise CheckError(f"device outputs differ from {report.reference} beyond tolerance: {', '.join(bad)}",
                         "a compiler or device problem; compare with `tvmgen compile --check` on the host")


# --------------------------------------------------------------------------- tune

def _tuning_db(root: Path | None, plat, device: str) -> Path | None:
    """--tuning-db checked before the model is imported: it must hold records for the target."""
    if root is None:
        return None
    from tvmgen import tune as tuning
    from tvmgen.compiler.platforms import make_target, target_dict

    if device not in ("cpu", "nnapi"):
        raise InputError(f"--tuning-db holds CPU kernels; --device {device} has none to take from it",
                         "leave out --tuning-db, or use --device cpu")
    tuning.open_database(root, make_target(target_dict(plat, device)))  # says which targets it has, if not this one
    return root


@cli.command()
@click.argument("model")
@click.option("--platform", "--target", "platform",
              help="Tune for this platform. [default: host; over RPC: what the device reports]")
@click.option("--device", default="cpu", show_default=True, type=click.Choice(["cpu"]),
              help="Processor to tune for (MetaSchedule's CPU rules).")
@click.option("--trials", default=64, show_default=True, type=click.IntRange(min=1),
              help="Measured candidates per task (fused operator). Trials already in the database count.")
@click.option("--db", "db_root", type=click.Path(path_type=Path),
              help="Database root; one directory per target inside. [default: $TVMGEN_TUNING_DIR, "
                   "else ~/.local/state/tvmgen/tuning]")
@click.option("--key", help="Time the candidates on this RPC device instead of here.")
@click.option("--tracker", metavar="HOST:PORT", help="--key: get the device from this tracker.")
@click.option("--proxy", metavar="HOST:PORT", help="--key: reach the device through this proxy.")
@click.option("--session-timeout", default=120, show_default=True, help="--key: seconds per measuring session.")
@click.option("--num-cores", type=click.IntRange(min=1),
              help="Threads the tuned code will run with: candidates timed here use this many "
                   "(TVM_NUM_THREADS), so tune once per thread count you deploy with. "
                   "[default: this machine's physical cores, or the device's threads]")
@click.option("--input", "input_flags", multiple=True, metavar="NAME:SHAPE[:DTYPE]", help="As for compile.")
def tune(model, platform, device, trials, db_root, key, tracker, proxy, session_timeout, num_cores, input_flags):
    """Tune MODEL's operators with MetaSchedule into a database `compile --tuning-db` reuses.

    Candidates run here, or on a device over RPC (--key with --tracker or --proxy: the same
    servers as `tvmgen bench`). Rerunning continues where the database stops: each task gets
    --trials measured candidates in all. MetaSchedule's own log goes to the log file.

    \b
      tvmgen tune builtin:mobilenet --trials 32
      tvmgen compile builtin:mobilenet --tuning-db ~/.local/state/tvmgen/tuning --check
      tvmgen tune model.onnx --key phone --tracker 127.0.0.1:9190 --db tuning/
    """
    from tvmgen import bench as benching, builtin, frontends, tune as tuning
    from tvmgen.compiler import export as exporter
    from tvmgen.compiler.platforms import check_pair, get_platform, make_target, target_dict
    from tvmgen.frontends.base import InputOverride

    tuning.check_dependencies()
    if (tracker or proxy) and not key:
        raise InputError("--tracker/--proxy name where the device is; --key names the device", "add --key KEY")
    root = db_root or tuning.default_root()
    where = None
    if key:
        where = tuning.Device(key, tracker, proxy, session_timeout)
        with logs.step(f"Connecting to device {key!r} via {'tracker ' + tracker if tracker else 'proxy ' + str(proxy)}"):
            remote, info = benching.connect(benching.Target(key, tracker, proxy, session_timeout))
            threads = int(remote.get_function("runtime.NumThreads")())
            del remote  # the tracker lends the device to one session at a time: the measurements need it
        console.print(f"  [dim]device: {info.get('platform', '?')} ({info.get('arch', '?')}), {threads} threads[/]")
        platform = platform or info.get("platform") or "host"
        num_cores = num_cores or threads
    plat = get_platform(platform or "host")
    check_pair(plat, device)
    if not key and plat.name != "host":
        raise InputError(f"candidates for {plat.name} cannot be timed on this machine",
                         "time them on the device: --key K --tracker HOST:PORT, with the device served by "
                         "`tvmgen rpc-app` on a phone or `tvmgen rpc device --platform linux-aarch64` (qemu, here)")
    if num_cores is None:
        import psutil

        num_cores = psutil.cpu_count(logical=False) or os.cpu_count() or 1
    compiler = exporter.linker(plat, False)  # a missing toolchain fails now, not after the import
    target = make_target(target_dict(plat, device))
    with tempfile.TemporaryDirectory(prefix="tvmgen-tune-") as scratch:
        model_path = builtin.materialize(model, Path(scratch)) if model.startswith("builtin:") else Path(model)
        with logs.step(f"Importing {model}"):
            imported = frontends.load(model_path, [InputOverride.parse(f) for f in input_flags])
        summary = tuning.run(imported, target, trials, root, where or tuning.Device(), num_cores, compiler)
    tuning.print_summary(summary, trials)
    console.print(f"[green]✓[/] database: [bold]{summary.directory}[/]")
    console.print(f"  use it: tvmgen compile {model} --platform {plat.name} --tuning-db {root}")


# --------------------------------------------------------------------------- Android apps

_ABI_PLATFORMS = {"android-arm64": "arm64-v8a", "android-armv7": "armeabi-v7a", "android-x86_64": "x86_64"}


def _app_options(kind, package, name, platforms, release, keystore, key_alias, install, run_app, serial, **kw):
    from tvmgen.android.app import AppOptions

    if release and not (keystore and key_alias):
        raise InputError("--release needs --keystore FILE and --key-alias ALIAS",
                         "the passwords come from TVMGEN_KEYSTORE_PASSWORD / TVMGEN_KEY_PASSWORD or a prompt")
    return AppOptions(kind=kind, package=package, app_name=name, abis=[_ABI_PLATFORMS[p] for p in platforms],
                      release=release, keystore=keystore, key_alias=key_alias, install=install or run_app,
                      run=run_app, serial=serial, **kw)


def _finish_app(project: Path, opts, artifacts_ok: bool):
    """Build, sign, install and run when the tools are here; otherwise say what is missing."""
    from tvmgen.android import app as android_app

    missing = android_app.missing_for_apk()
    if missing or not artifacts_ok:
        console.print(f"[yellow]![/] {android_app.summary_of_missing(missing, project)}")
        if not artifacts_ok:
            console.print("  - the model was compiled as an object archive (no NDK here): "
                          "run this command again with ANDROID_NDK_HOME set")
        if opts.install or opts.run:
            raise ToolMissingError("cannot install or run: the APK could not be built here",
                                   "install what is missing (tvmgen doctor), then run this command again")
        return
    apk = android_app.build_apk(project, opts)
    console.print(f"[green]✓[/] APK: [bold]{apk}[/]")
    if opts.install:
        results = android_app.install_and_run(apk, opts, project / "results")
        if results is not None:
            click.echo(json.dumps(results, indent=2))


def _android_only(platforms=(), release=False, run=False):
    """Flags the iOS app does not take, refused with what to do instead."""
    if any(p != "ios-arm64" for p in platforms):
        raise InputError("--platform ios-arm64 cannot be mixed with Android ABIs", "make one app per platform")
    if release:
        raise InputError("--release, --keystore and --key-alias sign Android apps",
                         "iOS apps are signed by Xcode with --team-id (automatic signing)")
    if run:
        raise InputError("--run is Android's headless mode", "the iOS deploy app runs the model at launch and logs "
                         "'tvmgen results {...}' (Console.app, or xcrun devicectl device process launch --console)")


def _ios_app(kind, model, device, input_flags, package, name, out, force, team_id, install, serial, rpc):
    """The iOS app (templates/ios_rpc): compile as a system library, render, and build where Xcode is."""
    from tvmgen.ios import app as ios_app

    stem = ios_app.model_stem(model)
    opts = ios_app.IosAppOptions(
        kind=kind, model=model, device=device, input_flags=tuple(input_flags),
        bundle_id=package or f"org.tvmgen.{''.join(c for c in stem.lower() if c.isalnum()) or 'model'}",
        app_name=name or f"{stem} (tvmgen)", team_id=team_id or "", install=install, device_id=serial, rpc=rpc)
    default_out = Path("out") / ("ios-rpc-app" if kind == "rpc" else f"{stem}-ios-{device}-app")
    result = ios_app.create(opts, out or default_out, force)
    ios_app.report(result, int(rpc.get("port", 9090)))


_platforms_option = click.option(
    "--platform", "platforms", multiple=True, default=["android-arm64"], show_default=True,
    type=click.Choice([*_ABI_PLATFORMS, "ios-arm64"]),
    help="Android ABI(s) to build for (repeatable), or ios-arm64: the iOS app (Xcode project).")
_app_common = [
    _platforms_option,
    click.option("--package", default=None, help="Application id. [default: org.tvmgen.<model> / org.tvmgen.rpc]"),
    click.option("--name", default=None, help="App name shown on the phone."),
    click.option("-o", "--out", type=click.Path(path_type=Path), help="Project directory to write."),
    click.option("--force", is_flag=True, help="Replace the project directory if it exists."),
    click.option("--release", is_flag=True, help="Sign with your release key instead of tvmgen's debug key."),
    click.option("--keystore", type=click.Path(path_type=Path), help="--release: the keystore file."),
    click.option("--key-alias", help="--release: the key's alias. Passwords: TVMGEN_KEYSTORE_PASSWORD / "
                                     "TVMGEN_KEY_PASSWORD, or a prompt; never on the command line."),
    click.option("--install", is_flag=True, help="Install on the phone with adb."),
    click.option("--serial", help="The phone, when several are attached (adb devices; iOS: the devicectl device id)."),
    click.option("--team-id", help="iOS: the Apple developer team that signs the app (DEVELOPMENT_TEAM); "
                                   "needed where it is built (macOS with Xcode)."),
]


def _with(options):
    def deco(f):
        for o in reversed(options):
            f = o(f)
        return f
    return deco


@cli.command()
@click.option("--model", "model", required=True, help="The model (as for compile), e.g. mobilenet.pb or builtin:mobilenet.")
@click.option("--device", default="cpu", show_default=True, type=click.Choice(["cpu", "opencl", "nnapi", "metal"]),
              help="Where the model runs on the phone (opencl falls back to CPU on the phone when absent; "
                   "metal: iOS).")
@click.option("--gpu-family", default="generic", show_default=True, type=click.Choice(["adreno", "mali", "generic"]))
@click.option("--input", "input_flags", multiple=True, metavar="NAME:SHAPE[:DTYPE]", help="As for compile.")
@click.option("--kind", default="deploy", show_default=True, type=click.Choice(["deploy", "rpc"]),
              help="deploy: the model app; rpc: the RPC app (as tvmgen rpc-app).")
@click.option("--run", "run_app", is_flag=True, help="Install, launch headless, wait for the results and print them.")
@click.option("--iterations", default=10, show_default=True, help="--run: timed runs on the phone.")
@click.option("--strategy", default="patterns", show_default=True, type=click.Choice(["patterns", "cost"]),
              help="--device nnapi: how to place operators (as for `tvmgen partition`).")
@click.option("--feature-level", type=click.IntRange(1, 8), help="--device nnapi: highest NNAPI feature level.")
@click.option("--cost-table", type=click.Path(path_type=Path), help="--device nnapi --strategy cost: JSON cost table.")
@click.option("--tuning-db", type=click.Path(path_type=Path),
              help="CPU kernels tuned by `tvmgen tune` for the phone (as for compile); used by the CPU builds.")
@_with(_app_common)
def app(model, device, gpu_family, input_flags, kind, run_app, iterations, strategy, feature_level, cost_table,
        tuning_db, platforms, package, name, out, force, release, keystore, key_alias, install, serial, team_id):
    """Model -> Android app project -> signed APK -> phone (or, with --platform ios-arm64, an iOS app).

    Compiles the model for each ABI (and a CPU fallback for --device opencl or nnapi), renders the app from
    templates/android_deploy, and where the Android SDK, NDK and a TVM source tree are present builds
    it with Gradle, zipaligns, signs (apksigner v2 + v3), verifies, installs and launches it.
    Elsewhere it stops after rendering and says what is missing (`tvmgen doctor` lists it all).

    \b
      tvmgen app --model mobilenet.pb --input input:1x224x224x3 --device opencl
      tvmgen app --model builtin:mobilenet --install --run --serial R58M123
      tvmgen app --platform ios-arm64 --model builtin:mobilenet --device metal --team-id AB12CD34EF
    """
    from tvmgen import apps, builtin, frontends
    from tvmgen.compiler import build
    from tvmgen.compiler.platforms import PLATFORMS, check_pair
    from tvmgen.frontends.base import InputOverride
    from tvmgen.toolchains import AndroidNdk

    if kind == "rpc":
        raise InputError("--kind rpc builds the RPC app, which takes no model", "use `tvmgen rpc-app --platform android`")
    if "ios-arm64" in platforms:
        _android_only(platforms, release=release, run=run_app)
        if tuning_db:
            raise InputError("--tuning-db has no ios-arm64 kernels to give: tuning times candidates on the device, "
                             "and an iOS app cannot load uploaded code (it serves only the models linked into it)",
                             "leave it out for --platform ios-arm64: the iOS build uses the default CPU schedules")
        return _ios_app("deploy", model, device, input_flags, package, name, out, force, team_id, install, serial, {})
    stem = model.split(":", 1)[1] if model.startswith("builtin:") else Path(model).stem
    package = package or f"org.tvmgen.{''.join(c for c in stem.lower() if c.isalnum()) or 'model'}"
    name = name or f"{stem} (tvmgen)"
    apps.check_package(package)
    for p in platforms:
        check_pair(PLATFORMS[p], device)
    tuning_db = _tuning_db(tuning_db, PLATFORMS[platforms[0]], "cpu")
    out = out or Path("out") / f"{stem}-android-{device}-app"
    if out.exists() and not force:
        raise InputError(f"output directory {out} already exists", "pass --force to replace it, or choose another --out")
    opts = _app_options("deploy", package, name, platforms, release, keystore, key_alias, install, run_app, serial,
                        iterations=iterations)
    try:
        AndroidNdk().verify()
        linked = True
    except TvmgenError:
        linked = False
    with tempfile.TemporaryDirectory(prefix="tvmgen-app-") as scratch:
        scratch = Path(scratch)
        model_path = builtin.materialize(model, scratch) if model.startswith("builtin:") else Path(model)
        with logs.step(f"Importing {model}"):
            imported = frontends.load(model_path, [InputOverride.parse(f) for f in input_flags])
        artifacts = {}
        devices = [device] + (["cpu"] if device != "cpu" else [])
        for dev in devices:  # one ABI's artifacts ship today: the first --platform
            artifacts[dev] = scratch / f"model-{dev}"
            to_build, needs = imported, None
            if dev == "nnapi":  # stops here (exit 4) when this TVM has no NNAPI code generator
                to_build, needs = _nnapi_generate(imported, feature_level, strategy, cost_table)
            build.compile_to_artifact(to_build, build.BuildOptions(PLATFORMS[platforms[0]], dev, gpu_family,
                                                                   objects_only=not linked, runtime_needs=needs,
                                                                   tuning_db=tuning_db if dev != "opencl" else None),
                                      artifacts[dev], True, {"name": stem, "source": model, "format": imported.format})
        from tvmgen import artifact

        with artifact.staging(out, force) as staged:
            ctx = apps.android_context("deploy", package, name, stem, device, opts.abis,
                                       tvm_source_dir=os.environ.get("TVM_SOURCE_DIR", ""))
            with logs.step("Rendering the Android project (templates/android_deploy)"):
                apps.create_android_project("deploy", staged, ctx, artifacts)
    console.print(f"[green]✓[/] Android project: [bold]{out}[/]")
    _finish_app(out, opts, artifacts_ok=linked)


@cli.command("rpc-app")
@click.option("--platform", "target_os", default="android", show_default=True, type=click.Choice(["android", "ios"]),
              help="The RPC app's platform. iOS serves the model linked into the app (--model).")
@click.option("--abi", "platforms", multiple=True, default=["android-arm64"], show_default=True,
              type=click.Choice(list(_ABI_PLATFORMS)), help="Android ABI(s) to build for; repeatable.")
@click.option("--mode", type=click.Choice(["proxy", "tracker", "standalone"]),
              help="The app's default server mode (standalone: iOS only). [default: android proxy, ios standalone]")
@click.option("--address", help="The tracker/proxy address the app uses (standalone: the address it listens on). "
                                "[default: android 127.0.0.1, ios 0.0.0.0]")
@click.option("--port", default=9090, show_default=True, help="The tracker/proxy port (standalone: the port it listens on).")
@click.option("--key", help="The device key. [default: android / iphone]")
@click.option("--model", default="builtin:mobilenet", show_default=True,
              help="iOS: the model linked into the app, which it serves (iOS cannot load uploaded code).")
@click.option("--device", default="cpu", show_default=True, type=click.Choice(["cpu", "metal"]),
              help="iOS: where the linked model runs.")
@click.option("--usb", is_flag=True,
              help="Reach the host's proxy over the cable: adb reverse tcp:PORT tcp:PORT, then start the app "
                   "in proxy mode on 127.0.0.1 (no shared Wi-Fi needed).")
@_with([o for o in _app_common if o is not _platforms_option])  # rpc-app's --platform is the OS
def rpc_app(target_os, platforms, mode, address, port, key, model, device, usb, package, name, out, force, release,
            keystore, key_alias, install, serial, team_id):
    """The RPC app: the phone becomes a device for `tvmgen bench`.

    Renders templates/android_rpc (the native device server from jni/, packaged and watched by a
    service that restarts it), builds, signs and installs it where the tools are present.
    """
    from tvmgen import apps, artifact

    package = package or "org.tvmgen.rpc"
    name = name or "tvmgen RPC"
    if target_os == "ios":
        _android_only(release=release)
        rpc = {"mode": "standalone" if usb else mode or "standalone", "address": address or "0.0.0.0", "port": port,
               "key": key or "iphone"}
        return _ios_app("rpc", model, device, (), package, name, out, force, team_id, install, serial, rpc)
    if mode == "standalone":
        raise InputError("standalone mode is the iOS app's", "use --mode proxy or tracker for Android")
    mode, address, key = mode or "proxy", address or "127.0.0.1", key or "android"
    apps.check_package(package)
    if usb:
        mode, address = "proxy", "127.0.0.1"
    out = out or Path("out") / "android-rpc-app"
    if out.exists() and not force:
        raise InputError(f"output directory {out} already exists", "pass --force to replace it, or choose another --out")
    opts = _app_options("rpc", package, name, platforms, release, keystore, key_alias, install, False, serial,
                        usb=usb, rpc={"mode": mode, "address": address, "port": port, "key": key})
    with artifact.staging(out, force) as staged:
        ctx = apps.android_context("rpc", package, name, "-", "cpu", opts.abis,
                                   tvm_source_dir=os.environ.get("TVM_SOURCE_DIR", ""), rpc_mode=mode,
                                   rpc_address=address, rpc_port=port, rpc_key=key)
        with logs.step("Rendering the Android RPC app (templates/android_rpc)"):
            apps.create_android_project("rpc", staged, ctx, {})
    console.print(f"[green]✓[/] Android project: [bold]{out}[/]")
    if usb:
        console.print(f"  USB mode: start a proxy here (tvmgen rpc proxy --port {port}); the app reaches it through "
                      f"`adb reverse tcp:{port} tcp:{port}`")
    _finish_app(out, opts, artifacts_ok=True)


@cli.command()
@click.argument("model")
@click.option("--nnapi", "backend", flag_value="nnapi", required=True,
              help="Partition for Android's NNAPI (the only backend so far).")
@click.option("--feature-level", type=click.IntRange(1, 8), help="Highest NNAPI feature level the phones have.")
@click.option("--strategy", default="patterns", show_default=True, type=click.Choice(["patterns", "cost"]),
              help="patterns: TVM's greedy pattern partitioner; cost: keep a piece on TVM when its transitions "
                   "cost more than NNAPI saves (static cost table).")
@click.option("--cost-table", type=click.Path(path_type=Path), help="JSON overriding the static cost table.")
@click.option("--input", "input_flags", multiple=True, metavar="NAME:SHAPE[:DTYPE]", help="As for compile.")
@click.option("--json", "json_path", type=click.Path(path_type=Path), help="Write the report as JSON here.")
@click.option("--measure", is_flag=True,
              help="--strategy cost: measure the TVM-side cost of each op kind on a device over RPC (--key and "
                   "--tracker or --proxy) instead of the table's TVM column.")
@click.option("--key", help="--measure: the device's key.")
@click.option("--tracker", metavar="HOST:PORT", help="--measure: get the device from this tracker.")
@click.option("--proxy", metavar="HOST:PORT", help="--measure: reach the device through this proxy.")
@click.option("--platform", help="--measure: compile for this platform. [default: what the device reports]")
def partition(model, backend, feature_level, strategy, cost_table, input_flags, json_path, measure, key, tracker,
              proxy, platform):
    """Report how MODEL would be split between NNAPI and TVM: partitions, operators on each side with
    their share of FLOPs, what splits partitions and why, and the transitions per inference.

    \b
      tvmgen partition mobilenet.tflite --nnapi --feature-level 3
      tvmgen partition model.onnx --nnapi --strategy cost --json report.json
      tvmgen partition model.onnx --nnapi --strategy cost --measure --key phone --tracker 127.0.0.1:9190
    """
    from tvmgen import bench, builtin, frontends, nnapi
    from tvmgen.frontends.base import InputOverride

    if measure and (strategy != "cost" or not key or (tracker is None) == (proxy is None)):
        raise InputError("--measure times operators on a device for the cost strategy",
                         "pass --strategy cost --key K and one of --tracker HOST:PORT or --proxy HOST:PORT")
    costs = nnapi.load_costs(cost_table)
    measured = []
    with tempfile.TemporaryDirectory(prefix="tvmgen-") as scratch:
        path = builtin.materialize(model, Path(scratch)) if model.startswith("builtin:") else Path(model)
        with logs.step(f"Importing {model}"):
            imported = frontends.load(path, [InputOverride.parse(f) for f in input_flags])
        with logs.step(f"Partitioning for NNAPI ({strategy})"):
            partitioned, report = nnapi.partition(imported.mod, imported.params, len(imported.inputs), feature_level,
                                                  "patterns", costs)
        if measure:
            measured = nnapi.measure_tvm_costs(partitioned, bench.Target(key, tracker, proxy), platform, costs,
                                               Path(scratch))
            costs = nnapi.with_measured(costs, measured)
        if strategy == "cost":
            report = nnapi.cost_strategy(report, costs)
            report.tvm_costs = measured
    if measured:
        click.echo(nnapi.format_costs(measured))
    click.echo(nnapi.format_report(report))
    if json_path:
        json_path.write_text(json.dumps(report.to_json(), indent=2) + "\n")
        console.print(f"report: {json_path}")


def _artifact_reference(manifest, scratch: Path):
    """The reference runtime for an artifact's source model, when that model can still be read."""
    from tvmgen import builtin, frontends
    from tvmgen.frontends.base import InputOverride

    src = manifest.model.get("source", "")
    path = builtin.materialize(src, scratch) if src.startswith("builtin:") else Path(src)
    if not src or not path.exists():
        console.print(f"  [dim]no numerics check: the source model {src or '(unknown)'} is not here[/]")
        return None, None
    overrides = [InputOverride(s.name, s.shape, s.dtype) for s in manifest.inputs]
    if manifest.model.get("format") in ("tensorflow", "savedmodel"):
        overrides = []  # TF tensor names carry ':0'; the shapes were fixed at conversion
    try:
        imported = frontends.load(path, overrides)
    except TvmgenError as e:
        console.print(f"  [dim]no numerics check: cannot import {src} ({e.message})[/]")
        return None, None
    return imported.reference, imported.reference_name


# --------------------------------------------------------------------------- helpers

def _split(text):
    return [s.strip() for s in text.split(",") if s.strip()] if text else None


def _safe(name: str) -> str:
    return "".join(c if c.isalnum() or c in "-_." else "_" for c in name)


def _hash_model(path: Path) -> str:
    import hashlib

    from tvmgen.artifact import sha256_file

    if path.is_file():
        return sha256_file(path)
    h = hashlib.sha256()  # a SavedModel directory: hash its files in order
    for f in sorted(p for p in path.rglob("*") if p.is_file()):
        h.update(str(f.relative_to(path)).encode())
        h.update(sha256_file(f).encode())
    return h.hexdigest()


def _size(directory: Path) -> str:
    total = sum(p.stat().st_size for p in directory.iterdir() if p.is_file())
    return f"{total / 1e6:.1f} MB" if total > 1e5 else f"{total / 1e3:.1f} KB"


# --------------------------------------------------------------------------- doctor

@cli.command()
@click.option("--json", "as_json", is_flag=True, help="Print the checks as JSON on stdout.")
def doctor(as_json):
    """Check the tools the Android app build needs, with the fix for each one missing.

    \b
    Exit code: 0 when `tvmgen app` can build an APK here (JDK, Android SDK platform and
    build-tools, NDK, TVM source tree, apksigner, zipalign, aapt all usable);
    3 (missing tool) otherwise. adb, Gradle on PATH, qemu, the cross compiler, OpenCL and
    Xcode are reported but do not change the exit code.
    """
    from tvmgen.android import doctor as doc
    from tvmgen.errors import ToolMissingError

    found = doc.checks()
    if as_json:
        click.echo(json.dumps(doc.as_json(found), indent=2))
    else:
        click.echo(doc.table(found))
    if not doc.ready(found):
        sys.exit(ToolMissingError.exit_code)


def main():
    # TensorFlow and oneDNN print C++ log lines on import; tvmgen's own log has what matters.
    os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "3")
    os.environ.setdefault("TF_ENABLE_ONEDNN_OPTS", "0")
    logging.captureWarnings(True)
    try:
        cli.main(standalone_mode=False)
    except click.exceptions.Abort:
        console.print("aborted")
        sys.exit(130)
    except click.ClickException as e:
        e.show()
        sys.exit(e.exit_code)
    except TvmgenError as e:
        log.debug("error: %s", traceback.format_exc())
        console.print(f"[bold red]error:[/] {e.message}")
        if e.hint:
            console.print(f"  [bold]fix:[/] {e.hint}")
        if State.log_path:
            console.print(f"  [dim]log: {State.log_path}[/]")
        sys.exit(e.exit_code)
    except KeyboardInterrupt:
        console.print("interrupted")
        sys.exit(130)
    except Exception as e:  # an internal error: full traceback to the log, one line to the user
        log.error("internal error: %s", traceback.format_exc())
        console.print(f"[bold red]internal error:[/] {type(e).__name__}: {str(e).strip().splitlines()[-1] if str(e).strip() else ''}")
        if State.log_path:
            console.print(f"  the full traceback is in the log: {State.log_path}")
        console.print("  please report it with that log attached")
        sys.exit(1)
