"""``python -m tvmgen.remote.tvm_server rpc_tracker|rpc_proxy|popen_worker ARGS``: one of TVM's Python RPC
servers or its process pool's worker (``tvm.exec.<name>``, run as ``python -m`` would), with TVM loaded without
PyTorch (tvmgen.load_tvm_without_torch): a tracker, a proxy or a worker timing tuning candidates never
exchanges tensors with PyTorch, and importing it is more than half of such a process's start (about 1.7 s of
CPU)."""

from __future__ import annotations

import contextlib
import os
import runpy
import sys

import tvmgen
from tvmgen.core import toolchains

SERVERS = ("rpc_tracker", "rpc_proxy", "popen_worker")


@contextlib.contextmanager
def torchless_workers(users: tuple[str, ...] = ()):
    """Inside the block, TVM's process pools (MetaSchedule's runners, the tracker's and proxy's server
    process) start their workers through this module, which loads TVM without PyTorch: a worker times
    candidates or serves RPC, and PyTorch's import was more than half of each worker's start (1.6 of 3.6 s),
    paid again whenever a timed-out candidate's worker is replaced. TVM's pool names its worker class at
    each start; the class is put back after the block (a worker started inside keeps its class). ``users``:
    modules that imported the class by name (TVM's tracker and proxy), given the same class."""
    import importlib

    from tvm.support import popen_pool

    class TorchlessWorker(popen_pool.PopenWorker):
        def _start(self):
            if self._proc is not None:
                return
            to_worker, from_worker = os.pipe(), os.pipe()  # (read, write) each
            ends = (to_worker[0], from_worker[1])  # the worker's
            try:
                self._proc = toolchains.pipe_worker(
                    [sys.executable, "-m", "tvmgen.remote.tvm_server", "popen_worker", *map(str, ends)],
                    ends,
                    self._stdout,
                    self._stderr,
                )
            except BaseException:
                os.close(to_worker[1])
                os.close(from_worker[0])
                raise
            finally:
                for fd in ends:
                    os.close(fd)
            self._reader = os.fdopen(from_worker[0], "rb")
            self._writer = os.fdopen(to_worker[1], "wb")

    modules = [popen_pool, *map(importlib.import_module, users)]
    before = [m.PopenWorker for m in modules]
    for m in modules:
        m.PopenWorker = TorchlessWorker
    try:
        yield
    finally:
        for m, cls in zip(modules, before):
            m.PopenWorker = cls


def main(argv: list[str]) -> None:
    if not argv or argv[0] not in SERVERS:
        sys.exit(f"usage: python -m tvmgen.remote.tvm_server {{{'|'.join(SERVERS)}}} ARGS (TVM's own options)")
    tvmgen.load_tvm_without_torch()
    module = f"tvm.exec.{argv[0]}"
    sys.argv = [module, *argv[1:]]
    with torchless_workers(("tvm.rpc.tracker", "tvm.rpc.proxy")):  # each serves from a pool worker of its own
        runpy.run_module(module, run_name="__main__", alter_sys=True)


if __name__ == "__main__":
    main(sys.argv[1:])
