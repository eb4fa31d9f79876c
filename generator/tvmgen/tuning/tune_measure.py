"""Where tuning candidates are built and timed: MetaSchedule loaded without its GPU intrinsics, an
in-process builder, and the runner (here, or a device over RPC: the pieces MetaSchedule's workers call)."""

from __future__ import annotations

import contextlib
import functools
import os
from dataclasses import dataclass
from pathlib import Path

from tvmgen.core.errors import InputError


def builder(compiler: Path, scratch: Path):
    """Builds candidates in this process, linked with the platform's compiler, each into a folder of its
    own under ``scratch`` (the caller removes it).

    MetaSchedule's LocalBuilder starts a fresh pool of Python workers for every batch; each one
    imports TVM again (10+ s on a busy 2-core machine) to build a function in 0.2 s.
    """
    import tempfile

    import tvm
    import tvm.support.cc as cc
    from tvm.ir.utils import derived_object
    from tvm.s_tir.meta_schedule.builder import BuilderResult, PyBuilder
    from tvm.s_tir.transform import RemoveWeightLayoutRewriteBlock

    from tvmgen.compiler.cpu import stack_tiles

    fcompile = cc.cross_compiler(str(compiler))

    @derived_object
    class InProcessBuilder(PyBuilder):
        def build(self, build_inputs):
            results = []
            for item in build_inputs:
                try:
                    mod = RemoveWeightLayoutRewriteBlock(skip_tensor_rewrite=True)(item.mod)
                    path = os.path.join(tempfile.mkdtemp(prefix="candidate-", dir=scratch), "candidate.so")
                    pipeline = stack_tiles.tir_pipeline(item.target)  # as `compile` builds
                    tvm.compile(mod, target=item.target, tir_pipeline=pipeline).export_library(path, fcompile=fcompile)
                    results.append(BuilderResult(path, None))
                except Exception as e:  # a candidate that does not build is a failed trial, not a failed run
                    results.append(BuilderResult(None, f"{type(e).__name__}: {e}"))
            return results

    return InProcessBuilder()


@dataclass
class Device:
    """Where candidates are timed: here (all None) or a device over RPC."""

    key: str | None = None
    tracker: str | None = None
    proxy: str | None = None
    session_timeout: int = 120
    gpu: bool = False  # candidates are GPU kernels (OpenCL): timed until a run lasts min_repeat_ms

    @property
    def min_repeat_ms(self) -> int:
        """A GPU kernel of a small model takes microseconds, near the launch cost and the timer's
        resolution: it is run until a measurement lasts this long (a CPU candidate once, as before)."""
        return 10 if self.gpu else 0

    @property
    def remote(self) -> bool:
        return self.key is not None

    def rpc_target(self):
        """The device as `tvmgen bench` reaches it (``remote.bench.Target``)."""
        from tvmgen.remote import bench

        assert self.key is not None
        return bench.Target(self.key, self.tracker, self.proxy, self.session_timeout)


def _rpc_address(tracker: str | None, proxy: str | None) -> str:
    """HOST:PORT of the tracker (else the proxy) that a remote device is reached through."""
    address = tracker or proxy
    if not address:
        raise InputError("a remote device needs --tracker HOST:PORT or --proxy HOST:PORT", "add one of them")
    return address


def rpc_session(_config, key: str, tracker: str | None, proxy: str | None, timeout: int):
    from tvm import rpc

    from tvmgen.remote.rpc import tracker_summary

    host, port = _rpc_address(tracker, proxy).rsplit(":", 1)
    if tracker:
        # The tracker queues a request for a key until a device has it, forever: a device that went
        # away would hang the tuning (MetaSchedule's RPC runner waits on its workers without a limit).
        if not tracker_summary(tracker).get(key, {}).get("total"):
            raise RuntimeError(f"no device with key {key!r} is registered with the tracker at {tracker}")
        session = rpc.connect_tracker(host, int(port)).request(key, priority=0, session_timeout=timeout)
    else:
        session = rpc.connect(host, int(port), key=key, session_timeout=timeout)
    _no_kernel_cache(session)
    return session


def _no_kernel_cache(session) -> None:
    """Each candidate's OpenCL kernels are built once: the device's kernel cache (libtvmgen_opencl's)
    is turned off for the session rather than filled with them, and set back by ``rpc_cleanup`` (a
    server that does not fork a process per session, e.g. in an app, keeps its cache)."""
    try:
        session._tvmgen_kernel_cache = str(session.get_function("tvmgen.opencl.cache_dir")())
        session.get_function("tvmgen.opencl.set_cache_dir")("")
    except Exception:  # no OpenCL backend there (a CPU device), or not tvmgen's server
        pass


def rpc_alloc_arguments(session, device, args_info, alloc_repeat):
    """Random arguments copied from here: tvmgen's device server has no random_fill_for_measure."""
    import numpy as np
    import tvm

    rng = np.random.default_rng(0)
    repeated = []
    for _ in range(alloc_repeat):
        args = []
        for info in args_info:
            _, dtype, shape = info
            host = (rng.standard_normal(shape) if "float" in dtype else rng.integers(0, 8, shape)).astype(dtype)
            t = tvm.runtime.empty(shape, dtype, device)
            t.copyfrom(host)
            args.append(t)
        repeated.append(args)
    return repeated


def rpc_cleanup(session, remote_path):
    cache = getattr(session, "_tvmgen_kernel_cache", None)
    if cache:
        with contextlib.suppress(Exception):  # the device may have gone
            session.get_function("tvmgen.opencl.set_cache_dir")(cache)
    if session is not None and remote_path is not None:
        with contextlib.suppress(Exception):  # the device may have gone; the next session starts clean anyway
            session.remove(remote_path)


def candidate_runner(ms, device: Device):
    """MetaSchedule's runner: LocalRunner here, an RPCRunner whose sessions come from rpc_session."""
    if device.key is None:  # not device.remote
        return ms.runner.LocalRunner(
            evaluator_config=ms.runner.EvaluatorConfig(
                number=3, repeat=1, min_repeat_ms=20, enable_cpu_cache_flush=False
            ),
            timeout_sec=60,
        )
    host, port = _rpc_address(device.tracker, device.proxy).rsplit(":", 1)  # sessions come from rpc_session
    return ms.runner.RPCRunner(
        rpc_config=ms.runner.RPCConfig(
            tracker_host=host,
            tracker_port=int(port),
            tracker_key=device.key,
            session_timeout_sec=device.session_timeout,
        ),
        evaluator_config=ms.runner.EvaluatorConfig(
            number=1, repeat=1, min_repeat_ms=device.min_repeat_ms, enable_cpu_cache_flush=False
        ),
        max_workers=1,
        f_create_session=functools.partial(
            rpc_session, key=device.key, tracker=device.tracker, proxy=device.proxy, timeout=device.session_timeout
        ),
        f_alloc_argument=rpc_alloc_arguments,
        f_cleanup=rpc_cleanup,
    )
