"""Where tuning candidates are timed: MetaSchedule's pool workers start with TVM loaded without PyTorch."""

from __future__ import annotations


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
