"""`tvmgen rpc tracker|proxy|device|stop|list` and `tvmgen devices`: TVM RPC servers and what they serve."""

from __future__ import annotations

from pathlib import Path

import click

from tvmgen.commands import options
from tvmgen.core import log as logs
from tvmgen.core.errors import InputError

console = logs.console


@click.group("rpc")
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
    from tvmgen.remote import rpc

    if detach:
        rpc.record(server)
        console.print(
            f"[green]✓[/] {what} at [bold]{server.address}[/] (pid {server.pid}, log {server.log}); "
            f"stop it with `tvmgen rpc stop {server.name}`"
        )
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


_host_option = click.option(
    "--host",
    default="127.0.0.1",
    show_default=True,
    help="Address to bind. Loopback unless you give an explicit address.",
)


@rpc_group.command("tracker")
@_host_option
@click.option("--port", default=9190, show_default=True, help="First port to try.")
@click.option("--port-end", type=int, help="Last port to try. [default: --port + 9]")
@click.option("--detach", is_flag=True, help="Run in the background; `tvmgen rpc stop tracker` stops it.")
def rpc_tracker(host, port, port_end, detach):
    """Start TVM's RPC tracker and wait until it accepts connections."""
    from tvmgen.remote import rpc

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
    from tvmgen.remote import rpc

    _run_or_detach(rpc.start_proxy(host, port, port_end or port + 99, web_port, tracker), detach, "RPC proxy")


@rpc_group.command("device")
@options.runtime_platform(help="linux-aarch64 runs the cross-built server under qemu-aarch64: the emulated phone CPU.")
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
    from tvmgen.remote import rpc

    if (proxy is None) == (tracker is None):
        raise InputError("give exactly one of --proxy HOST:PORT or --tracker HOST:PORT")
    server = rpc.start_device(
        platform,
        key,
        proxy=proxy,
        tracker=tracker,
        host=host,
        work_dir=work_dir,
        session_timeout=session_timeout,
        max_upload_mb=max_upload_mb,
    )
    _run_or_detach(server, detach, f'{platform} device "{key}" connected to {proxy or tracker}')


@rpc_group.command("stop")
@click.argument("names", nargs=-1)
@click.option("--all", "stop_all", is_flag=True, help="Stop every detached server.")
def rpc_stop(names, stop_all):
    """Stop detached servers by name (tracker, proxy, device-KEY), or --all."""
    from tvmgen.remote import rpc

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
    from tvmgen.remote import rpc

    for s in rpc.recorded():
        click.echo(f"{s.name}\t{s.address}\tpid {s.pid}\t{s.log}")


@click.command()
@click.option("--tracker", metavar="HOST:PORT", help="Ask this tracker for its devices.")
def devices(tracker):
    """Devices: keys on a tracker (free/total/pending), and phones on adb."""
    from tvmgen.android.tools import Adb
    from tvmgen.remote import rpc

    if tracker:
        keys = rpc.tracker_summary(tracker)
        click.echo(f"tracker {tracker}:")
        if not keys:
            click.echo("  (no devices)")
        for k, v in sorted(keys.items()):
            click.echo(f"  {k}: {v.get('free', 0)} free of {v.get('total', 0)}, {v.get('pending', 0)} waiting")
    adb = Adb()
    if adb.available():
        out = adb("devices", "-l")
        click.echo("adb:")
        lines = [ln for ln in out.stdout.splitlines()[1:] if ln.strip()]
        for ln in lines or ["  (no devices)"]:
            click.echo(f"  {ln.strip()}")
    elif not tracker:
        raise InputError(
            "nothing to list: no --tracker given and adb is not installed",
            "pass --tracker HOST:PORT, or install adb (apt-get install adb)",
        )
