"""`tvmgen tune`: MetaSchedule tuning of a model's CPU kernels into a database `compile --tuning-db` reads."""

from __future__ import annotations

import tempfile
import os
from pathlib import Path

import click

from tvmgen import log as logs
from tvmgen.errors import InputError

console = logs.console


@click.command()
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
