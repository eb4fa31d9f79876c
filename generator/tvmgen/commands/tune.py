"""`tvmgen tune`: MetaSchedule tuning of a model's CPU or OpenCL kernels into a database `compile --tuning-db` reads."""

from __future__ import annotations

import os
import tempfile
from pathlib import Path

import click

from tvmgen.commands import options
from tvmgen.core import log as logs
from tvmgen.core.errors import InputError

console = logs.console


@click.command()
@click.argument("model")
@click.option(
    "--platform",
    "--target",
    "platform",
    help="Tune for this platform. [default: host; over RPC: what the device reports]",
)
@options.device(
    ["cpu", "opencl"],
    help="Processor to tune for: cpu (MetaSchedule's CPU rules) or opencl (its GPU rules: thread-bound "
    "tiles, shared-memory fetches; timed on an OpenCL device over RPC, --key).",
)
@options.gpu_family(
    ["generic", "mali", "desktop"],
    help="--device opencl: the OpenCL family, as for compile (adreno builds use TVM's texture "
    "pipeline, which tuning does not cover).",
)
@click.option(
    "--trials",
    default=64,
    show_default=True,
    type=click.IntRange(min=1),
    help="Measured candidates per task (fused operator). Trials already in the database count.",
)
@click.option(
    "--db",
    "db_root",
    type=click.Path(path_type=Path),
    help="Database root; one directory per target inside. [default: $TVMGEN_TUNING_DIR, "
    "else ~/.local/state/tvmgen/tuning]",
)
@options.remote_device(
    "Time the candidates on this RPC device instead of here (needed for --device opencl).",
    prefix="--key: ",
    session_timeout=120,
)
@click.option(
    "--num-cores",
    type=click.IntRange(min=1),
    help="Threads the tuned code will run with: candidates timed here use this many "
    "(TVM_NUM_THREADS), so tune once per thread count you deploy with. "
    "[default: this machine's physical cores, or the device's threads]",
)
@options.inputs()
def tune(
    model, platform, device, gpu_family, trials, db_root, key, tracker, proxy, session_timeout, num_cores, input_flags
):
    """Tune MODEL's operators with MetaSchedule into a database `compile --tuning-db` reuses.

    Candidates run here, or on a device over RPC (--key with --tracker or --proxy: the same
    servers as `tvmgen bench`). Rerunning continues where the database stops: each task gets
    --trials measured candidates in all. MetaSchedule's own log goes to the log file.

    --device opencl tunes the GPU kernels (TVM's generic GPU pipeline; without a database they get
    dlight's default schedules, which are measured first): candidates are built here and timed on
    an OpenCL device over RPC. A phone: run the RPC app (`tvmgen rpc-app`, proxy mode) and reach it
    through `tvmgen rpc proxy` (USB: `adb reverse tcp:9090 tcp:9090`), or register it with a tracker;
    this machine's OpenCL (e.g. PoCL): `tvmgen rpc tracker --detach` then
    `tvmgen rpc device --key gpu --tracker 127.0.0.1:9190 --detach`.

    \b
      tvmgen tune builtin:mobilenet --trials 32
      tvmgen compile builtin:mobilenet --tuning-db ~/.local/state/tvmgen/tuning --check
      tvmgen tune model.onnx --key phone --tracker 127.0.0.1:9190 --db tuning/
      tvmgen tune model.onnx --device opencl --key phone --proxy 127.0.0.1:9090 --db tuning/
      tvmgen compile model.onnx --platform android-arm64 --device opencl --tuning-db tuning/
    """
    from tvmgen.compiler import pipeline
    from tvmgen.compiler.targets import database
    from tvmgen.compiler.targets import export as exporter
    from tvmgen.compiler.targets.platforms import check_pair, get_device, get_platform, make_target, target_dict
    from tvmgen.remote import bench as benching
    from tvmgen.tuning import tune as tuning

    tuning.check_dependencies()
    if (tracker or proxy) and not key:
        raise InputError("--tracker/--proxy name where the device is; --key names the device", "add --key KEY")
    gpu = get_device(device).gpu
    if gpu and not key:
        raise InputError(
            f"--device {device}: the candidates are timed on an OpenCL device over RPC, and no --key names one",
            "a phone: the RPC app (`tvmgen rpc-app`) with `tvmgen rpc proxy`, then --key K --proxy "
            "HOST:PORT; this machine's OpenCL: `tvmgen rpc tracker --detach`, `tvmgen rpc device --key "
            "gpu --tracker 127.0.0.1:9190 --detach`, then --key gpu --tracker 127.0.0.1:9190",
        )
    root = db_root or database.default_root()
    where = None
    if key:
        where = tuning.Device(key, tracker, proxy, session_timeout, gpu=gpu)
        with logs.step(benching.connecting(where.rpc_target())):
            remote, info = benching.connect(where.rpc_target())
            threads = int(remote.get_function("runtime.NumThreads")())
            del remote  # the tracker lends the device to one session at a time: the measurements need it
        console.print(
            f"  [dim]device: {info.get('platform', '?')} ({info.get('arch', '?')}), {threads} threads"
            + (f", devices: {', '.join(info['devices'])}" if info.get("devices") else "")
            + "[/]"
        )
        benching.say_emulated(
            key,
            info,
            "the candidates are ranked by the emulator's timings, which order schedules unlike the CPU (docs/cpu.md, "
            "ranking a cross build's candidates): this tests the path; a database for a phone needs the phone",
        )
        if gpu and info.get("devices") and device not in info["devices"]:
            raise InputError(
                f"device {key!r} has no {device} (it has: {', '.join(info['devices'])})",
                f"serve it from a device with an {device} driver, or tune --device cpu",
            )
        platform = platform or info.get("platform") or "host"
        num_cores = num_cores or threads
    plat = get_platform(platform or "host")
    check_pair(plat, device)
    if not key and plat.name != "host":
        raise InputError(
            f"candidates for {plat.name} cannot be timed on this machine",
            "time them on the device: --key K --tracker HOST:PORT, with the device served by `tvmgen rpc-app` "
            "on a phone or `tvmgen rpc device` on an aarch64 Linux board (`tvmgen rpc device --platform "
            "linux-aarch64` serves one under qemu here: it runs the path, but qemu's timings rank schedules "
            "unlike the CPU)",
        )
    if num_cores is None:
        import psutil

        num_cores = psutil.cpu_count(logical=False) or os.cpu_count() or 1
    compiler = exporter.linker(plat, False)  # a missing toolchain fails now, not after the import
    target = make_target(target_dict(plat, device, gpu_family))
    with tempfile.TemporaryDirectory(prefix="tvmgen-tune-") as scratch:
        imported = pipeline.load_model(model, Path(scratch), input_flags).imported
        summary = tuning.run(imported, target, trials, root, where or tuning.Device(), num_cores, compiler)
    tuning.print_summary(summary, trials)
    console.print(f"[green]✓[/] database: [bold]{summary.directory}[/]")
    flags = f" --device {device}" + (f" --gpu-family {gpu_family}" if gpu_family != "generic" else "") if gpu else ""
    console.print(f"  use it: tvmgen compile {model} --platform {plat.name}{flags} --tuning-db {root}")
