"""tvmgen.remote.tvm_server: TVM's tracker, proxy and process-pool workers (MetaSchedule's runners) with TVM
loaded without PyTorch. Linux's /proc shows what each process of a server has loaded."""

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
    from tvmgen.remote import rpc

    monkeypatch.setenv("TVMGEN_STATE_DIR", str(tmp_path))
    start = rpc.start_tracker if kind == "tracker" else rpc.start_proxy
    server = start("127.0.0.1", 19440, 19460)
    with stopping(server):
        processes = _processes(server.pid)
        commands = [Path(f"/proc/{p}/cmdline").read_bytes().replace(b"\0", b" ").decode() for p in processes]
        assert any("tvm_server popen_worker" in c for c in commands), commands  # the pool worker it serves from
        assert not [c for p, c in zip(processes, commands) if _loads_torch(p)]  # TVM's own worker loads it


def test_pool_workers_load_tvm_without_torch():
    """A worker started inside torchless_workers has TVM and not PyTorch (TVM's own worker imports both, as
    tvm_ffi imports PyTorch wherever it is installed); TVM's worker class is back after the block, and a
    worker started inside keeps its start."""
    import importlib.util

    from tvm.support import popen_pool

    from tvmgen.remote.tvm_server import torchless_workers

    def _loaded():  # sent by value (cloudpickle): this module is not importable in the worker
        import sys

        return {name: sys.modules.get(name) is not None for name in ("tvm", "torch")}

    assert importlib.util.find_spec("torch") is not None  # installed: a plain `import tvm` loads it
    original = popen_pool.PopenWorker
    with torchless_workers():
        assert popen_pool.PopenWorker is not original
        pool = popen_pool.PopenPoolExecutor(max_workers=1, timeout=60)
        assert pool.submit(_loaded).result() == {"tvm": True, "torch": False}
    assert popen_pool.PopenWorker is original
    (worker,) = pool._worker_map.values()
    worker.kill()  # as after a candidate's timeout: the next call starts it again, the same way
    assert pool.submit(_loaded).result() == {"tvm": True, "torch": False}
    pool.shutdown()
