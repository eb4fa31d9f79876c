"""What cpu_speed.py's child processes run: make a model, compile one build of it, or measure every runtime
on it at one thread count (one child each, so the timings do not share a process's state)."""

from __future__ import annotations

import importlib.util
import json
import sys
import time
from pathlib import Path

import benchlib
from cpu_speed_models import MAKERS, SEED, make_gemm, make_head

ATOL, RTOL = 1e-4, 1e-3  # the defaults of `tvmgen compile --check`


# =========================================================================== compiling (a child per build)


def _preimport(model_file: Path) -> None:
    """Load the Python modules a compile needs, so compile time is the model's, not Python's imports."""
    import tvm
    from tvm import relax  # noqa: F401

    import tvmgen.compiler.build
    import tvmgen.frontends

    if model_file.suffix == ".onnx":
        import onnx  # noqa: F401
        import onnxslim  # noqa: F401
        import tvm.relax.frontend.onnx

        import tvmgen.frontends.onnx
    else:
        import tflite  # noqa: F401
        import tvm.relax.frontend.tflite  # noqa: F401

        import tvmgen.frontends.tflite  # noqa: F401


def worker_compile(model_file: Path, out_dir: Path, variant: str, tuning_db: Path | None) -> dict:
    from tvmgen import frontends
    from tvmgen.compiler import build
    from tvmgen.compiler.targets.platforms import PLATFORMS
    from tvmgen.core.artifact import sha256_file

    _preimport(model_file)
    opts = build.BuildOptions(
        PLATFORMS["host"],
        "cpu",
        schedules=variant != "unscheduled",
        tuning_db=tuning_db if variant == "tuned" else None,
    )
    t0 = time.perf_counter()
    imported = frontends.load(model_file, [])
    t1 = time.perf_counter()
    info = {
        "name": model_file.stem,
        "source": str(model_file),
        "format": imported.format,
        "sha256": sha256_file(model_file),
    }
    manifest = build.compile_to_artifact(imported, opts, out_dir, True, info)
    t2 = time.perf_counter()
    files = {p.relative_to(out_dir).as_posix(): p.stat().st_size for p in out_dir.rglob("*") if p.is_file()}
    return {
        "variant": variant,
        "import_s": t1 - t0,
        "build_export_s": t2 - t1,
        "compile_s": t2 - t0,
        "artifact_bytes": sum(files.values()),
        "files": files,
        "inputs": [s.to_json() for s in imported.inputs],
        "outputs": [s.to_json() for s in manifest.outputs],
        "target": manifest.target,
    }


# =========================================================================== measuring (a child per thread count)


class Runtime(benchlib.Timed):
    """One way of running the model: ``run()`` does set inputs, run, fetch outputs as numpy arrays."""

    def __init__(self, key: str, run, version: str, threads: int):
        super().__init__(key, run)
        self.version, self.threads = version, threads


def tvm_runtime(variant: str, artifact_dir: Path, inputs: dict) -> Runtime:
    import tvm

    from tvmgen.runtime.runner import HostModel, tvm_pool_size

    model = HostModel(artifact_dir)
    # The first call starts TVM's thread pool, which reads TVM_NUM_THREADS then.
    model.run(inputs)
    pool = tvm_pool_size()  # without pinning this process to one CPU
    return Runtime(variant, lambda: model.run(inputs), f"TVM {tvm.__version__} Relax VM", pool)


def onnxruntime_runtime(model_file: Path, inputs: dict, threads: int) -> Runtime:
    import onnxruntime as ort

    opts = ort.SessionOptions()
    opts.log_severity_level = 3
    opts.intra_op_num_threads = threads
    opts.inter_op_num_threads = 1
    opts.execution_mode = ort.ExecutionMode.ORT_SEQUENTIAL
    sess = ort.InferenceSession(str(model_file), opts, providers=["CPUExecutionProvider"])
    feeds = {i.name: inputs[i.name] for i in sess.get_inputs()}
    return Runtime(
        "onnxruntime",
        lambda: sess.run(None, feeds),
        f"onnxruntime {ort.__version__}",
        sess.get_session_options().intra_op_num_threads,
    )


def litert_runtime(model_file: Path, inputs: dict, threads: int) -> Runtime:
    from importlib.metadata import version

    from ai_edge_litert.interpreter import Interpreter

    interp = Interpreter(model_path=str(model_file), num_threads=threads)
    interp.allocate_tensors()
    names = list(inputs)
    feeds = [
        (d["index"], inputs[d["name"]] if d["name"] in inputs else inputs[names[k]])
        for k, d in enumerate(interp.get_input_details())
    ]
    out_idx = [d["index"] for d in interp.get_output_details()]

    def run():
        for idx, arr in feeds:
            interp.set_tensor(idx, arr)
        interp.invoke()
        return [interp.get_tensor(j) for j in out_idx]

    return Runtime("litert", run, f"LiteRT {version('ai-edge-litert')} (XNNPACK)", threads)


def numpy_runtime(inputs: dict, threads: int) -> Runtime:
    """A @ B through numpy's BLAS, limited to ``threads`` by threadpoolctl (else OPENBLAS_NUM_THREADS)."""
    import numpy as np

    a, b = inputs["A"], inputs["B"]
    actual, blas = threads, "BLAS, threads via OPENBLAS_NUM_THREADS"
    if importlib.util.find_spec("threadpoolctl"):
        from threadpoolctl import threadpool_info, threadpool_limits

        threadpool_limits(limits=threads, user_api="blas")  # not restored: it holds for this child's life
        found = [i for i in threadpool_info() if i.get("user_api") == "blas"]
        if found:
            actual = found[0]["num_threads"]
            blas = f"{found[0]['internal_api']} {found[0].get('version') or ''}, threads via threadpoolctl"
    return Runtime("numpy", lambda: [a @ b], f"numpy {np.__version__} ({blas})", actual)


def read_bandwidth() -> dict:
    """One core's read bandwidth as the guard measures it (``tvmgen.reports.machine_peaks``): NumPy's sum and
    max over 256 MB, the fastest of 5 runs each, in GB/s."""
    from tvmgen.reports import machine_peaks

    by = machine_peaks.read_bandwidths(repeats=5)
    return {
        "gbs": max(by.values()),
        "by": by,
        "bytes": machine_peaks.READ_BYTES,
        "how": "NumPy sum and max over 256 MB, one core",
    }


def worker_measure(spec: dict) -> dict:
    from tvmgen.core import artifact
    from tvmgen.core.model import random_inputs
    from tvmgen.runtime.runner import compare

    threads, model_file = spec["threads"], Path(spec["model_file"])
    runs, rounds, min_time = spec["runs"], spec["rounds"], spec["min_time"]
    artifacts = {v: Path(d) for v, d in spec["artifacts"].items()}
    manifest = artifact.load(next(iter(artifacts.values())))
    inputs = random_inputs(manifest.inputs, SEED)
    reference = {
        "onnxruntime": lambda: onnxruntime_runtime(model_file, inputs, threads),
        "litert": lambda: litert_runtime(model_file, inputs, threads),
        "numpy": lambda: numpy_runtime(inputs, threads),
    }[spec["reference"]]()
    runtimes = [tvm_runtime(v, d, inputs) for v, d in artifacts.items()] + [reference]
    # a model that streams its weights is held to the memory's speed, measured here before the runs
    bandwidth = read_bandwidth() if spec.get("weight_bytes") else None
    settled = benchlib.round_robin(runtimes, spec["warmup"], runs, rounds, min_time)

    out = {"threads_requested": threads, "rounds": rounds, "settle_s": settled, "runtimes": {}}
    if bandwidth:
        out["read_bandwidth"] = bandwidth
    names = [s.name for s in manifest.outputs]
    for r in runtimes:
        entry = {
            "runtime": r.version,
            "threads_actual": r.threads,
            **benchlib.stats(r.times_ms, "ms", ("median", "mean", "min", "max", "p90")),
            "runs": len(r.times_ms),
        }
        if r is not reference:
            rows = compare(r.outputs, reference.outputs, names)
            worst = max(x["max_abs"] for x in rows)
            entry["outputs"] = {
                "max_abs_diff": worst,
                "ok": all(x["max_abs"] <= ATOL + RTOL * x.get("ref_max", 0) for x in rows),
                "per_output": rows,
            }
        out["runtimes"][r.key] = entry
    return out


def run_worker(args) -> None:
    from tvmgen.core.errors import TvmgenError

    def compute():  # whatever TVM, TensorFlow or LiteRT print goes to stderr
        try:
            return _work(args.worker, json.loads(args.spec))
        except TvmgenError as e:  # tvmgen's own errors say what to do: pass them on without a traceback
            print(f"error: {e}", file=sys.stderr)
            sys.exit(e.exit_code)

    benchlib.serve_worker(compute)


def _work(mode: str, spec: dict) -> dict:
    if mode != "make":  # only the makers use PyTorch: TVM loads without it, as the CLI's does (1.7 s less)
        import tvmgen

        tvmgen.load_tvm_without_torch()
    if mode == "make":
        path = Path(spec["model_file"])
        if spec["maker"] == "gemm":
            return make_gemm(path, spec["gemm_size"])
        if spec["maker"] == "head":
            return make_head(path, tuple(spec["head_shape"]))
        return MAKERS[spec["maker"]](path)
    if mode == "compile":
        return worker_compile(
            Path(spec["model_file"]),
            Path(spec["artifact"]),
            spec["variant"],
            Path(spec["tuning_db"]) if spec.get("tuning_db") else None,
        )
    if mode == "measure":
        return worker_measure(spec)
    raise SystemExit(f"unknown worker {mode}")
