"""RPC servers: TVM's own tracker and proxy (tvm.exec.*), and the native device server from jni/.

Each runs as its own process group (the proxy forks a worker that outlives its parent otherwise)
so stopping it stops everything it started. Detached servers are recorded as JSON files in the
state directory, which `tvmgen rpc stop` and `tvmgen rpc list` read.
"""

from __future__ import annotations

import json
import os
import signal
import socket
import sys
import time
from dataclasses import asdict, dataclass
from pathlib import Path

from tvmgen.core import log as logs
from tvmgen.core import toolchains
from tvmgen.core.errors import InputError, ToolMissingError, TvmgenError

QEMU_SYSROOT = "/usr/aarch64-linux-gnu"


class RpcError(TvmgenError):
    """A tracker, proxy or device that cannot be reached or does not answer as expected."""

    exit_code = 6


@dataclass
class Server:
    name: str  # tracker | proxy | device-<key>
    pid: int
    host: str
    port: int
    log: str
    command: list

    @property
    def address(self) -> str:
        return f"{self.host}:{self.port}"

    def alive(self) -> bool:
        try:
            os.kill(self.pid, 0)
        except OSError:
            return False
        try:  # a zombie child of this process counts as dead
            pid, _ = os.waitpid(self.pid, os.WNOHANG)
            return pid == 0
        except ChildProcessError:
            return True

    def stop(self, timeout: float = 5.0) -> None:
        """Stop the server's whole process group (the proxy's worker included)."""
        for sig in (signal.SIGTERM, signal.SIGKILL):
            try:
                os.killpg(self.pid, sig)
            except ProcessLookupError:
                return
            deadline = time.time() + timeout
            while time.time() < deadline:
                if not self.alive() and not _group_alive(self.pid):
                    return
                time.sleep(0.05)


def _group_alive(pgid: int) -> bool:
    try:
        os.killpg(pgid, 0)
        return True
    except ProcessLookupError:
        return False


def parse_address(text: str, what: str) -> tuple[str, int]:
    host, sep, port = text.rpartition(":")
    if not sep or not host or not port.isdigit() or not 0 < int(port) < 65536:
        raise InputError(f"cannot read the {what} address {text!r}", "write it as HOST:PORT, e.g. 127.0.0.1:9190")
    return host, int(port)


def free_port(host: str, start: int, end: int) -> int:
    for port in range(start, end + 1):
        with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
            try:
                s.bind((host, port))
                return port
            except OSError:
                continue
    raise RpcError(f"no free port on {host} between {start} and {end}", "stop what uses them, or pass another --port")


def state_dir() -> Path:
    """Where detached servers' records and logs live ($TVMGEN_STATE_DIR, else ~/.local/state/tvmgen/rpc)."""
    base = os.environ.get("TVMGEN_STATE_DIR")
    state = os.environ.get("XDG_STATE_HOME") or str(Path.home() / ".local" / "state")
    d = Path(base) if base else Path(state) / "tvmgen" / "rpc"
    d.mkdir(parents=True, exist_ok=True)
    return d


def _spawn(name: str, command: list[str], host: str, port: int, env: dict | None = None) -> Server:
    log_path = state_dir() / f"{name}.log"
    logs.log.debug("starting %s: %s", name, " ".join(command))
    proc = toolchains.spawn(command, log_path, env=env)
    return Server(name, proc.pid, host, port, str(log_path), command)


def wait_until(server: Server, ready, what: str, timeout: float) -> None:
    deadline = time.time() + timeout
    while time.time() < deadline:
        if not server.alive():
            tail = Path(server.log).read_text()[-1500:] if Path(server.log).exists() else ""
            raise RpcError(f"the {server.name} exited while starting:\n{tail.strip()}", f"see {server.log}")
        if ready():
            return
        time.sleep(0.1)
    server.stop()
    raise RpcError(f"the {server.name} did not {what} within {timeout:.0f} s", f"see {server.log}")


def accepts(host: str, port: int) -> bool:
    try:
        with socket.create_connection((host, port), timeout=0.5):
            return True
    except OSError:
        return False


def _start_tvm_server(kind: str, module: str, host: str, port: int, port_end: int, extra: list[str]) -> Server:
    """Start one of TVM's Python servers (``tvm.exec.<module>``, through tvmgen.remote.tvm_server: without
    PyTorch) on the first free port in [port, port_end) and wait until it accepts connections."""
    port = free_port(host, port, port_end)
    cmd = [sys.executable, "-m", "tvmgen.remote.tvm_server", module]
    cmd += ["--host", host, "--port", str(port), "--port-end", str(port + 1)]
    server = _spawn(kind, cmd + extra, host, port)
    # The server is a Python process importing all of TVM first: on a loaded machine (a compile
    # beside it) that alone can pass 30 s, so wait as long as for a device server.
    wait_until(server, lambda: accepts(host, port), f"accept connections on {host}:{port}", 120)
    return server


def start_tracker(host: str = "127.0.0.1", port: int = 9190, port_end: int = 9199) -> Server:
    return _start_tvm_server("tracker", "rpc_tracker", host, port, port_end, ["--silent"])


def start_proxy(
    host: str = "127.0.0.1", port: int = 9090, port_end: int = 9189, web_port: int = 0, tracker: str | None = None
) -> Server:
    try:
        import tornado  # noqa: F401  - TVM's proxy needs it; it is not an apache-tvm dependency
    except ImportError as e:
        raise ToolMissingError("the RPC proxy needs tornado", "pip install tornado") from e
    extra = ["--web-port", str(web_port)] + (["--tracker", tracker] if tracker else [])
    return _start_tvm_server("proxy", "rpc_proxy", host, port, port_end, extra)


def start_device(
    platform: str,
    key: str,
    proxy: str | None = None,
    tracker: str | None = None,
    host: str = "127.0.0.1",
    work_dir: Path | None = None,
    session_timeout: int = 600,
    max_upload_mb: int = 512,
    extra: list[str] | None = None,
    prefix: Path | None = None,
) -> Server:
    """Start the native device server; for linux-aarch64 under qemu with the aarch64 TVM runtime."""
    from tvmgen.runtime import runtime_build

    if (proxy is None) == (tracker is None):
        raise InputError("give exactly one of --proxy or --tracker")
    prefix = prefix or runtime_build.cached_build(platform)
    binary = prefix / "bin" / "tvmgen-rpc-server"
    cmd = [str(binary)]
    if platform == "linux-aarch64":
        qemu = toolchains.Qemu()
        if not qemu.available():
            raise ToolMissingError(
                "qemu-aarch64 not found: it runs the aarch64 device server here", "apt-get install qemu-user"
            )
        # the server tells its clients: kernels timed there are timed by the emulator, not a CPU
        cmd = [str(qemu.verify()), "-L", QEMU_SYSROOT, *cmd, "--emulator", "qemu-aarch64"]
    work_dir = Path(work_dir or state_dir() / f"device-{key}-work")
    cmd += [
        "--key",
        key,
        "--work-dir",
        str(work_dir),
        "--session-timeout",
        str(session_timeout),
        "--max-upload-mb",
        str(max_upload_mb),
        *(extra or []),
    ]
    if proxy is not None:
        cmd += ["--proxy", proxy]
        h, p = parse_address(proxy, "proxy")
    else:
        assert tracker is not None  # exactly one of the two (checked above)
        cmd += ["--tracker", tracker, "--host", host]
        h, p = parse_address(tracker, "tracker")
    server = _spawn(f"device-{key}", cmd, h, p)
    marker = "waiting for a client on proxy" if proxy else "registered with tracker"
    wait_until(
        server,
        lambda: marker in Path(server.log).read_text(errors="replace"),
        f"reach the {'proxy' if proxy else 'tracker'} at {h}:{p}",
        120,
    )
    time.sleep(0.3)  # a proxy refuses a duplicate key right after the key is sent
    if not server.alive():
        tail = Path(server.log).read_text(errors="replace").strip().splitlines()[-1:]
        raise RpcError(f"the device server stopped: {' '.join(tail)}", f"see {server.log}")
    return server


# ------------------------------------------------------------------ detached servers


def record(server: Server) -> Path:
    path = state_dir() / f"{server.name}.json"
    path.write_text(json.dumps(asdict(server), indent=2))
    return path


def recorded() -> list[Server]:
    out = []
    for p in sorted(state_dir().glob("*.json")):
        try:
            s = Server(**json.loads(p.read_text()))
        except (ValueError, TypeError):
            p.unlink()
            continue
        if s.alive() or _group_alive(s.pid):
            out.append(s)
        else:
            p.unlink()
    return out


def stop_recorded(names: list[str] | None = None) -> list[Server]:
    stopped = []
    for s in recorded():
        if names and s.name not in names:
            continue
        s.stop()
        (state_dir() / f"{s.name}.json").unlink(missing_ok=True)
        stopped.append(s)
    return stopped


# ------------------------------------------------------------------ tracker queries


def tracker_summary(tracker: str) -> dict:
    """{key: {"free": n, "pending": n, "total": n}} from the tracker; a clear error when it is unreachable."""
    from tvm import rpc

    host, port = parse_address(tracker, "tracker")
    if not accepts(host, port):
        raise RpcError(
            f"cannot reach the RPC tracker at {tracker} (connection refused or timed out)",
            "start one with `tvmgen rpc tracker`, or check --tracker HOST:PORT",
        )
    try:
        summary = rpc.connect_tracker(host, port).summary()
    except Exception as e:
        raise RpcError(f"{tracker} did not answer as a TVM RPC tracker: {e}", "check --tracker HOST:PORT") from e
    keys = {}
    for k, v in summary.get("queue_info", {}).items():
        keys[k] = {"free": v.get("free", 0), "pending": v.get("pending", 0)}
    for info in summary.get("server_info", []):
        k = info.get("key", "").removeprefix("server:")
        keys.setdefault(k, {"free": 0, "pending": 0})
        keys[k]["total"] = keys[k].get("total", 0) + 1
    return keys
