"""TVM's tracker and proxy, started through tvmgen.remote.tvm_server: TVM loaded without PyTorch, in the
server and in the pool worker it serves from."""

from __future__ import annotations

from pathlib import Path

import pytest

from helpers import stopping


def _processes(pid: int) -> list[int]:
    """``pid`` and its descendants."""
    out, todo = [], [pid]
    while todo:
        p = todo.pop()
        out.append(p)
        for task in Path(f"/proc/{p}/task").iterdir():
            todo += [int(c) for c in (task / "children").read_text().split()]
    return out


def _loads_torch(pid: int) -> bool:
    return any("libtorch" in line for line in Path(f"/proc/{pid}/maps").read_text().splitlines())


@pytest.mark.parametrize("kind", ["tracker", "proxy"])
def test_server_and_its_pool_worker_load_tvm_without_torch(kind, tmp_path, monkeypatch):
    if not Path("/proc/self/task").is_dir():
        pytest.skip("needs Linux's /proc")
    from tvmgen.remote import rpc

    monkeypatch.setenv("TVMGEN_STATE_DIR", str(tmp_path))
    start = rpc.start_tracker if kind == "tracker" else rpc.start_proxy
    server = start("127.0.0.1", 19440, 19460)
    with stopping(server):
        processes = _processes(server.pid)
        commands = [Path(f"/proc/{p}/cmdline").read_bytes().replace(b"\0", b" ").decode() for p in processes]
        assert any("tvm_server popen_worker" in c for c in commands), commands  # the pool worker it serves from
        assert not [c for p, c in zip(processes, commands) if _loads_torch(p)]  # TVM's own worker loads it
