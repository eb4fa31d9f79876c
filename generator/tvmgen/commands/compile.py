"""`tvmgen compile`: a model file to an artifact directory, checked against its reference on request."""

from __future__ import annotations

import tempfile
from pathlib import Path

import click

from tvmgen.commands import options
from tvmgen.compiler.targets import database
from tvmgen.core import artifact
from tvmgen.core import log as logs
from tvmgen.core.errors import InputError
from tvmgen.reports import profile as kernel_profile
from tvmgen.runtime import check as numerics
from tvmgen.tuning import remedy

console = logs.console


def _default_out(model: str, platform: str, device: str) -> Path:
    from tvmgen.compiler.pipeline import model_name

    return Path("out") / f"{model_name(model)}-{platform}-{device}"


@click.command()
@click.argument("model_arg", metavar="MODEL", required=False)
@click.option("--model", "model_opt", metavar="MODEL", help="The model (same as the MODEL argument).")
@click.option(
    "--platform",
    "--target",
    "platform",
    default="host",
    show_default=True,
    help="Where the model runs: host, linux-aarch64, android-arm64, android-armv7, "
    "android-x86_64, ios-arm64. (--target is an alias.)",
)
@options.device()
@options.gpu_family()
@options.inputs()
@click.option(
    "--const",
    "const_flags",
    multiple=True,
    metavar="NAME=VALUE",
    help="Bind a model input to a value at compile time (a number, or one per element, comma-separated), "
    "e.g. --const sr=16000: what depends on it folds (an If on it keeps one branch); the artifact has "
    "one input fewer and its manifest lists the constant.",
)
@options.state()
@click.option("--inputs", "tf_inputs", metavar="NAMES", help="TensorFlow: comma-separated input node names.")
@click.option("--outputs", "tf_outputs", metavar="NAMES", help="TensorFlow: comma-separated output node names.")
@click.option(
    "-o",
    "--out",
    type=click.Path(path_type=Path),
    help="Artifact directory to write. [default: out/<model>-<platform>-<device>]",
)
@click.option("--force", is_flag=True, help="Replace the output directory if it exists.")
@click.option(
    "--separate-params",
    is_flag=True,
    help="Write weights to model.params instead of into the library. fp16 weights stay fp16 there "
    "(cast to fp32 as the model runs) instead of being folded into fp32 constants twice the size.",
)
@click.option(
    "--objects-only",
    is_flag=True,
    help="Write an object archive (model.tar) for the app build to link, instead of linking here.",
)
@click.option("--check", is_flag=True, help="Compare outputs with the reference runtime on seeded random inputs.")
@options.tolerances("--check: ")
@options.seed("--check: seed for the random inputs.")
@click.option(
    "--schedules",
    "schedules",
    default="default",
    show_default=True,
    type=click.Choice(["default", "none"]),
    help="CPU kernels: tvmgen's default schedules (tiled, vectorised, parallel), or none: TVM's "
    "own lowering (correct but many times slower; to rule out a scheduling problem).",
)
@click.option(
    "--cpu-features",
    metavar="+F[,+F...]",
    help="Extra LLVM CPU features the compiled code may use, e.g. +dotprod: Arm's 8-bit dot product "
    "(Cortex-A55/A75 and later), which 8-bit matmuls then run on. The library then needs a CPU that "
    "has them. The host's own features are always used unless --cpu names another CPU.",
)
@click.option(
    "--cpu",
    "cpu_name",
    metavar="NAME",
    help="The CPU (LLVM's name) the code is built for: its vector width and instructions. Default: this "
    "machine's CPU for --platform host (code that may not run on an older CPU), a generic NEON CPU for "
    "Arm platforms. E.g. haswell or x86-64-v3 (any AVX2 machine), skylake-avx512, cortex-a76.",
)
@options.tuning_db(
    help="CPU or OpenCL kernels tuned by `tvmgen tune` (its --db root): used where the database has them."
)
@click.option(
    "--remedy-budget",
    envvar="TVMGEN_REMEDY_BUDGET",
    type=click.FloatRange(min=0),
    default=remedy.DEFAULT_BUDGET_S,
    show_default=True,
    metavar="SECONDS",
    help="Host builds: the compile runs the model here a few times kernel by kernel; where a kernel is far "
    "below this machine's speed, MetaSchedule searches schedules for that kernel alone for up to this many "
    "seconds (timed here), records them in the tuning database (--tuning-db, else tvmgen tune's default), and "
    "the faster of the two builds is kept. 0: no profile and no search. Other platforms: --remedy-key. "
    "[env: TVMGEN_REMEDY_BUDGET]",
)
@click.option(
    "--remedy-key",
    metavar="KEY",
    help="Run the slow-kernel remedy on this RPC device instead of here (with --remedy-tracker or "
    "--remedy-proxy: the servers `tvmgen bench` uses): the build is profiled there kernel by kernel, and the "
    "candidates and both builds are timed there. What cross builds (android, linux-aarch64) need: without a "
    "device they are not remedied, since qemu's timings and a cost model rank schedules unlike the CPU "
    "(docs/cpu.md).",
)
@click.option("--remedy-tracker", metavar="HOST:PORT", help="--remedy-key: get the device from this tracker.")
@click.option("--remedy-proxy", metavar="HOST:PORT", help="--remedy-key: reach the device through this proxy.")
@options.nnapi()
@options.precision()
def compile(
    model_arg,
    model_opt,
    platform,
    device,
    gpu_family,
    input_flags,
    tf_inputs,
    tf_outputs,
    out,
    force,
    separate_params,
    objects_only,
    check,
    rtol,
    atol,
    seed,
    schedules="default",
    tuning_db=None,
    strategy="patterns",
    feature_level=None,
    cost_table=None,
    cpu_features=None,
    cpu_name=None,
    const_flags=(),
    precision="fp32",
    state_flags=(),
    remedy_budget=remedy.DEFAULT_BUDGET_S,
    remedy_key=None,
    remedy_tracker=None,
    remedy_proxy=None,
):
    """Compile MODEL into an artifact directory (library + manifest.json).

    MODEL is an .onnx, .tflite, .pt2 (torch.export) or .pb (TensorFlow frozen graph) file,
    a TensorFlow SavedModel directory, or builtin:mobilenet.

    \b
    Examples:
      tvmgen compile builtin:mobilenet --check
      tvmgen compile model.onnx --platform android-arm64 --device opencl --gpu-family adreno
      tvmgen compile mobilenet.pb --input input:1x224x224x3:float32 --platform linux-aarch64
      tvmgen compile model-int8.onnx --platform android-arm64 --cpu-features +dotprod
      tvmgen compile kws.onnx --state h0=hn --check
    """
    from tvmgen.compiler import pipeline
    from tvmgen.compiler.targets.platforms import BuildTarget, check_pair, get_device, get_platform
    from tvmgen.frontends import state_pairs
    from tvmgen.frontends.base import InputOverride, parse_consts

    model = model_opt or model_arg
    if model_arg and model_opt and model_arg != model_opt:
        raise InputError("the model is given twice (argument and --model)", "give it once")
    if not model:
        raise InputError("no model given", "tvmgen compile MODEL (try builtin:mobilenet)")
    plat = get_platform(platform)
    check_pair(plat, device)  # before --cpu: an unknown pair is the first thing to say
    if get_device(device).partitions:
        options.nnapi_notice()
    if cpu_name:
        plat = plat.with_cpu(cpu_name)
    if cpu_features:
        plat = plat.with_features(cpu_features.split(","))
    for flag in input_flags:
        InputOverride.parse(flag)  # a malformed --input is said before anything else runs
    consts = parse_consts(const_flags)
    for flag in state_flags:
        state_pairs.parse(flag)  # a malformed --state too
    target = BuildTarget(plat, device, gpu_family)  # resolved once; every later step reads this
    tuning_db = database.checked_database(tuning_db, [target])
    pipeline.check_build_options(target, separate_params=separate_params, precision=precision)
    out = out or _default_out(model, platform, device)
    artifact.refuse_existing(out, force)
    no_remedy = (
        "--remedy-budget 0"
        if not remedy_budget
        else remedy.applies(target, schedules == "default", objects_only, on_device=bool(remedy_key))
    )
    if remedy_key and no_remedy is not None:
        raise InputError(f"--remedy-key: the slow-kernel remedy does not apply: {no_remedy}", "leave out --remedy-key")
    remedy_device = _remedy_device(remedy_key, remedy_tracker, remedy_proxy, target) if remedy_budget else None

    with tempfile.TemporaryDirectory(prefix="tvmgen-") as scratch:
        loaded = pipeline.load_model(
            model,
            Path(scratch),
            input_flags,
            input_names=_split(tf_inputs),
            output_names=_split(tf_outputs),
            consts=consts,
            state=state_flags,
        )
        imported = loaded.imported
        if imported.constants:
            console.print(
                f"  constants: {', '.join(f'{n}={v}' for n, v in imported.constants.items())} "
                f"(bound at compile time; {len(imported.inputs)} input(s) left)"
            )

        build_options = dict(
            nnapi=pipeline.NnapiOptions(feature_level, strategy, cost_table),
            separate_params=separate_params,
            objects_only=objects_only,
            schedules=schedules == "default",
            precision=precision,
        )

        def checked(staged, opts):
            return numerics.check_against_reference(imported, staged, opts, rtol, atol, seed, scratch)

        def rebuild(db_root: Path, rebuilt: Path) -> None:  # the remedy's second build, checked as the first
            pipeline.compile_model(
                loaded, target, rebuilt, verify=checked if check else None, tuning_db=db_root, **build_options
            )

        def verify(staged, opts):
            if remedy_device is not None:  # the guard and the remedy on the device; --check as without it
                if check:
                    checked(staged, opts)
                with logs.step(
                    f"Profiling the build kernel by kernel on device {remedy_device.key!r} (slow-kernel guard)"
                ):
                    slow, threads = remedy.on_device(remedy_device, target, staged, seed)
                if slow:
                    timer = remedy.time_builds_on(remedy_device, seed)
                    _remedy(
                        imported,
                        target,
                        staged,
                        slow,
                        None,
                        remedy_budget,
                        tuning_db,
                        rebuild,
                        Path(scratch),
                        threads,
                        remedy_device,
                        timer,
                    )
                return
            here = checked(staged, opts) if check else _run_here(staged, seed)
            if not here:  # the artifact itself did not run here: its kernels' speed is not known
                if target.platform.name != "host" and target.kind.target_kind == "llvm":
                    why = no_remedy or f"{target.platform.name} kernels are not timed here"
                    console.print(f"  [dim]kernel speed: not measured, no slow-kernel remedy: {why}[/]")
                return
            slow = kernel_profile.guard_host_model(*here, staged)
            if not slow:
                return
            if no_remedy is not None:
                console.print(f"  [dim]slow-kernel remedy not run: {no_remedy}[/]")
                return
            _remedy(
                imported,
                target,
                staged,
                slow,
                here[1],
                remedy_budget,
                tuning_db,
                rebuild,
                Path(scratch),
                here[0].threads,
            )

        logs.log.info("slow-kernel remedy: %s", no_remedy or f"budget {remedy_budget:g} s")
        manifest = pipeline.compile_model(
            loaded,
            target,
            out,
            force=force,
            verify=verify if check or no_remedy is None else None,
            tuning_db=tuning_db,
            **build_options,
        )
        console.print(f"[green]✓[/] artifact: [bold]{out}[/] ({manifest.export['library']}, {_size(out)} total)")
        for s in manifest.state:
            console.print(
                f"  state {s['input']} -> {s['output']} ({'x'.join(map(str, s['shape'])) or 'scalar'} {s['dtype']}): "
                f"held by the runtime from run to run, from {s['initial'] or 'zeros'}"
            )
        if manifest.export.get("finish_command"):
            console.print(f"  to link it later: cd {out} && {manifest.export['finish_command']}")


def _remedy_device(key, tracker, proxy, target):
    """The device --remedy-key names (a ``tune.Device``), reached and checked before anything is built: it
    must be the platform the build is for. None: no --remedy-key."""
    from tvmgen.remote import bench
    from tvmgen.tuning import tune

    if not key:
        if tracker or proxy:
            raise InputError(
                "--remedy-tracker/--remedy-proxy say where the device is; --remedy-key names it", "add --remedy-key KEY"
            )
        return None
    if (tracker is None) == (proxy is None):
        raise InputError(
            "--remedy-key needs exactly one of --remedy-tracker HOST:PORT or --remedy-proxy HOST:PORT",
            "the tracker the device registered with (`tvmgen rpc tracker`), or the proxy a phone's RPC app reached",
        )
    device = tune.Device(key, tracker, proxy)
    with logs.step(bench.connecting(device.rpc_target())):
        info = bench.in_session(device.rpc_target(), lambda remote, info: info)
    where = info.get("platform")
    if where and where != target.platform.name:
        raise InputError(
            f"--remedy-key {key!r} is a {where} device ({info.get('arch', '?')}), and this build is for "
            f"{target.platform.name}",
            f"give a {target.platform.name} device, or compile with --platform {where}",
        )
    bench.say_emulated(
        key,
        info,
        "the remedy's timings are the emulator's, which rank schedules unlike the CPU (docs/cpu.md, ranking a cross "
        "build's candidates)",
    )
    return device


def _remedy(
    imported,
    target,
    staged,
    slow,
    inputs,
    budget_s,
    tuning_db,
    rebuild,
    scratch: Path,
    threads,
    device=None,
    timer=None,
) -> None:
    """The slow-kernel remedy (``tuning.remedy``) where it applies to this build; said where it does not.
    ``device`` and ``timer``: on a device over RPC (``--remedy-key``), ``inputs`` then unused."""
    from tvmgen.compiler.targets import export
    from tvmgen.core.errors import ToolMissingError
    from tvmgen.tuning import tune

    try:
        tune.check_dependencies()
    except ToolMissingError as e:
        console.print(f"  [yellow]![/] slow-kernel remedy not run: {e.message}; {e.hint}")
        return
    compiler = export.linker(target.platform, False)
    assert compiler is not None  # a build the remedy applies to links here
    remedy.apply(
        imported,
        target.tvm,
        staged,
        slow,
        inputs or {},
        budget_s=budget_s,
        root=tuning_db or database.default_root(),
        compiler=compiler,
        rebuild=rebuild,
        scratch=scratch,
        threads=threads,
        device=device,
        timer=timer,
    )


def _run_here(staged: Path, seed: int):
    """The staged host build run once here for the guard, where --check does not run it; a model that
    cannot run on random inputs is built all the same (said, and logged)."""
    from tvmgen.core import interrupts

    try:
        return remedy.run_here(staged, seed)
    except Exception as e:
        interrupts.reraise_if_interrupted(e)
        logs.log.info("the slow-kernel guard could not run the model", exc_info=True)
        console.print(f"  [yellow]![/] kernel speed not measured: the model did not run on random inputs ({e})")
        return None


def _split(text):
    return [s.strip() for s in text.split(",") if s.strip()] if text else None


def _size(directory: Path) -> str:
    total = sum(p.stat().st_size for p in directory.iterdir() if p.is_file())
    return f"{total / 1e6:.1f} MB" if total > 1e5 else f"{total / 1e3:.1f} KB"
