"""This machine's measured peaks: the slow-kernel guard's yardstick beside the model's own kernels.

Held only to the other kernels of its model, a kernel is never slow when all of them are: a model whose
every convolution lost its schedule (a layout fallback leaving most of its FLOPs unscheduled) showed no slow
kernel. So a profile taken here also measures, in the same process and with the same thread pool:

- **compute**: a register-tiled matrix product compiled by tvmgen for this machine (``PROBE``: 64 rows, a
  constant 512 x 512 weight, 33.5 MFLOP, its weights in L2), the fastest of ``RUNS`` runs: what a scheduled
  convolution or matmul reaches here. The fastest, not the median: noise on a shared machine only adds time,
  and a short multi-threaded run loses most of it when another process takes a core from its pool (a lowered
  peak hides slow kernels). Its library is built once per target, tvmgen and TVM version, in the
  user cache (``$TVMGEN_CACHE_DIR``), which takes a few seconds the first time;
- **memory**: one core's read bandwidth, the faster of NumPy's sum and max over 256 MB (beyond any CPU's
  caches; the two agree within a few percent where memory is the limit), for kernels whose speed is the
  memory's (fewer FLOPs than bytes of weights: a classifier head over few rows).

Both are the best of short runs on a machine that may be shared: the guard leaves a wide
margin (``slow_kernels.PEAK_RATIO``), and a remote device's profile (``tvmgen bench``) is held to its own
kernels only, as no probe runs there; the slow-kernel remedy on a device (``compile --remedy-key``) runs the probe
there, cross-built for its CPU, and has no bandwidth line.
"""

from __future__ import annotations

import logging
import time
from dataclasses import asdict, dataclass
from pathlib import Path

import numpy as np

log = logging.getLogger("tvmgen.peaks")

PROBE = (64, 512, 512)  # rows, inner size, columns of the probe's product
RUNS = 15
READ_BYTES = 256 << 20
READ_REPEATS = 3


@dataclass
class Peaks:
    gflops: float  # the probe product with this process's thread pool
    read_gbs: float  # one core's read bandwidth
    threads: int  # the pool the probe ran on
    how: str
    device: str | None = None  # the RPC device whose peaks these are (its key); None: this machine's

    def to_json(self) -> dict:
        return asdict(self)

    @classmethod
    def from_json(cls, d: dict | None) -> Peaks | None:
        return cls(**d) if d else None


def measure() -> Peaks | None:
    """The host's peaks (see the module doc); None, logged, where the probe cannot be built or run."""
    try:
        gflops, threads = _probe_gflops()
        return Peaks(
            gflops,
            read_bandwidth(),
            threads,
            f"a {'x'.join(map(str, PROBE))} product compiled by tvmgen (fastest of {RUNS} runs); "
            "one core reading 256 MB",
        )
    except Exception as e:
        from tvmgen.core import interrupts

        interrupts.reraise_if_interrupted(e)
        log.info("no machine peaks for the slow-kernel guard", exc_info=True)
        return None


def read_bandwidth(nbytes: int = READ_BYTES, repeats: int = READ_REPEATS) -> float:
    """One core's read bandwidth in GB/s: the faster of ``read_bandwidths``."""
    return max(read_bandwidths(nbytes, repeats).values())


def read_bandwidths(nbytes: int = READ_BYTES, repeats: int = READ_REPEATS) -> dict[str, float]:
    """GB/s of NumPy's sum and of its max over ``nbytes`` (one core, vectorised), each the fastest of
    ``repeats`` after one untimed pass."""
    a = np.ones(nbytes // 4, dtype=np.float32)
    best = {}
    for name, f in (("sum", a.sum), ("max", a.max)):
        f()
        times = []
        for _ in range(repeats):
            t0 = time.perf_counter()
            f()
            times.append(time.perf_counter() - t0)
        best[name] = a.nbytes / min(times) / 1e9
    return best


def _probe_gflops() -> tuple[float, int]:
    from tvmgen.runtime.runner import HostModel

    model = HostModel(probe_artifact())
    x = np.random.default_rng(0).standard_normal((1, PROBE[0], PROBE[1])).astype(np.float32)
    model.run({"x": x})  # the pool's threads started
    times = []
    for _ in range(RUNS):
        t0 = time.perf_counter()
        model.run({"x": x})
        times.append(time.perf_counter() - t0)
    return probe_flops() / min(times) / 1e9, model.threads


def probe_flops() -> int:
    """The probe product's FLOPs per run."""
    rows, inner, cols = PROBE
    return 2 * rows * inner * cols


def probe_artifact(target=None) -> Path:
    """The probe compiled for this machine (or ``target``, a ``BuildTarget``: a device's CPU), once per target
    (under a lock: parallel profiles share it)."""
    import hashlib
    import json

    import tvm

    from tvmgen import __version__
    from tvmgen.compiler.targets.platforms import PLATFORMS, BuildTarget
    from tvmgen.core import artifact
    from tvmgen.core.resources import cache_dir

    target = target or BuildTarget(PLATFORMS["host"], "cpu")
    key = hashlib.sha256(json.dumps([target.spec, __version__, tvm.__version__, PROBE]).encode()).hexdigest()[:16]
    out = cache_dir() / "peaks" / f"probe-{key}"
    if (out / "manifest.json").is_file():
        return out
    out.parent.mkdir(parents=True, exist_ok=True)
    with artifact.exclusive(out.with_name(out.name + ".lock")):
        if not (out / "manifest.json").is_file():
            _compile_probe(out, target)
    return out


def _compile_probe(out: Path, target) -> None:
    import tempfile

    import onnx
    from onnx import TensorProto, helper, numpy_helper

    from tvmgen.compiler import pipeline
    from tvmgen.core.log import console

    rows, inner, cols = PROBE
    w = np.random.default_rng(0).standard_normal((inner, cols)).astype(np.float32) * inner**-0.5
    graph = helper.make_graph(
        [helper.make_node("MatMul", ["x", "w"], ["y"])],
        "probe",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, rows, inner])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, [1, rows, cols])],
        [numpy_helper.from_array(w, "w")],
    )
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    model.ir_version = 8
    quiet, console.quiet = console.quiet, True  # the probe is not the user's compile
    try:
        with tempfile.TemporaryDirectory(prefix="tvmgen-probe-") as tmp:
            path = Path(tmp) / "probe.onnx"
            onnx.save(model, str(path))
            loaded = pipeline.load_model(path, Path(tmp), propose_state=False)
            pipeline.compile_model(loaded, target, out, info={"name": "probe"})
    finally:
        console.quiet = quiet
