"""``python -m tvmgen.remote.tvm_server rpc_tracker|rpc_proxy|popen_worker ARGS``: one of TVM's Python RPC
servers or its process pool's worker (``tvm.exec.<name>``, run as ``python -m`` would), with TVM loaded without
PyTorch (tvmgen.load_tvm_without_torch): a tracker, a proxy or a worker timing tuning candidates never
exchanges tensors with PyTorch, and importing it is more than half of such a process's start (about 1.7 s of
CPU)."""

from __future__ import annotations

import runpy
import sys

import tvmgen

SERVERS = ("rpc_tracker", "rpc_proxy", "popen_worker")


def main(argv: list[str]) -> None:
    if not argv or argv[0] not in SERVERS:
        sys.exit(f"usage: python -m tvmgen.remote.tvm_server {{{'|'.join(SERVERS)}}} ARGS (TVM's own options)")
    tvmgen.load_tvm_without_torch()
    module = f"tvm.exec.{argv[0]}"
    sys.argv = [module, *argv[1:]]
    runpy.run_module(module, run_name="__main__", alter_sys=True)


if __name__ == "__main__":
    main(sys.argv[1:])
