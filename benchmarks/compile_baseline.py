#!/usr/bin/env python3
"""Baseline: untuned tvmgen (TVM 0.27 Relax VM) against each format's reference runtime, on the host CPU.

For three models, built here (nothing is downloaded):

  builtin-mobilenet   tvmgen.builtin.mobilenet_onnx() (MobileNet v1 style, width 0.5), ONNX, 1x3x224x224
  mobilenetv2-torch   a MobileNetV2 (inverted residuals, width 1.0) written in torch, exported to ONNX
                      with torch.onnx.export (TorchScript exporter), 1x3x224x224
  keras-cnn-tflite    a small Keras CNN (Conv2D, DepthwiseConv2D, pooling, Dense) converted with
                      tf.lite.TFLiteConverter, 1x224x224x3

it measures

  compile s      tvmgen's own import + build + export: frontends.load() then
                 compiler.build.compile_to_artifact() for host/cpu (Python module imports excluded)
  artifact MB    bytes of every file in the artifact directory / 1e6
  tvmgen ms      median latency of runner.HostModel.run() (input copy, VM call, output to numpy)
  reference ms   median latency of onnxruntime (CPUExecutionProvider, intra_op_num_threads=N) for
                 ONNX, LiteRT Interpreter(num_threads=N) for TFLite (set inputs, invoke, get outputs)
  ratio          tvmgen ms / reference ms (above 1: tvmgen is slower)

at 1 and 2 threads. TVM's thread pool reads TVM_NUM_THREADS once, when it starts, so every
measurement runs in a child process of this script (hidden --worker mode) with TVM_NUM_THREADS
set; the child reports the pool size TVM actually got (runtime.NumThreads). The reference
runtime runs in its own child with the same thread count. Models are made and compiled in
children too (TensorFlow and torch are never loaded into one process).

    .venv/bin/python benchmarks/compile_baseline.py            # full run (~3 min on 2 cores)
    .venv/bin/python benchmarks/compile_baseline.py --quick    # smoke test: 1 warm-up, 5 runs
    .venv/bin/python benchmarks/compile_baseline.py --json out.json

The table goes to stdout; progress goes to stderr.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import benchlib

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "3")
os.environ.setdefault("TF_ENABLE_ONEDNN_OPTS", "0")

ROOT = Path(__file__).resolve().parent.parent
SEED = 0

# name -> (how the model file is made, file suffix, reference runtime)
MODELS = {
    "builtin-mobilenet": ("builtin", ".onnx", "onnxruntime"),
    "mobilenetv2-torch": ("torch", ".onnx", "onnxruntime"),
    "keras-cnn-tflite": ("keras", ".tflite", "litert"),
}


def progress(msg: str) -> None:
    print(f"[bench {time.strftime('%H:%M:%S')}] {msg}", file=sys.stderr, flush=True)


# =========================================================================== model makers

def make_builtin(path: Path) -> dict:
    import onnx

    from tvmgen.builtin import mobilenet_onnx

    onnx.save(mobilenet_onnx(), str(path))
    return {"input": "1x3x224x224 float32 (NCHW)"}


def make_torch_mobilenetv2(path: Path) -> dict:
    """MobileNetV2 (Sandler et al. 2018) at width 1.0 with random weights and random BN statistics."""
    import torch
    from torch import nn

    torch.manual_seed(SEED)

    def conv_bn(cin, cout, k, stride, groups=1, act=True):
        layers = [nn.Conv2d(cin, cout, k, stride, k // 2, groups=groups, bias=False), nn.BatchNorm2d(cout)]
        if act:
            layers.append(nn.ReLU6(inplace=True))
        return layers

    class InvertedResidual(nn.Module):
        def __init__(self, cin, cout, stride, expand):
            super().__init__()
            hidden = cin * expand
            layers = conv_bn(cin, hidden, 1, 1) if expand != 1 else []
            layers += conv_bn(hidden, hidden, 3, stride, groups=hidden)
            layers += conv_bn(hidden, cout, 1, 1, act=False)
            self.body = nn.Sequential(*layers)
            self.residual = stride == 1 and cin == cout

        def forward(self, x):
            y = self.body(x)
            return x + y if self.residual else y

    # (expansion t, channels c, repeats n, first stride s) from the paper
    config = [(1, 16, 1, 1), (6, 24, 2, 2), (6, 32, 3, 2), (6, 64, 4, 2), (6, 96, 3, 1), (6, 160, 3, 2), (6, 320, 1, 1)]
    layers = conv_bn(3, 32, 3, 2)
    cin = 32
    for t, c, n, s in config:
        for i in range(n):
            layers.append(InvertedResidual(cin, c, s if i == 0 else 1, t))
            cin = c
    layers += conv_bn(cin, 1280, 1, 1)
    model = nn.Sequential(*layers, nn.AdaptiveAvgPool2d(1), nn.Flatten(), nn.Dropout(0.2), nn.Linear(1280, 1000))
    with torch.no_grad():  # non-trivial batch-norm statistics, so folding them is exercised
        for m in model.modules():
            if isinstance(m, nn.BatchNorm2d):
                m.running_mean.uniform_(-0.1, 0.1)
                m.running_var.uniform_(0.5, 1.5)
                m.weight.uniform_(0.5, 1.5)
                m.bias.uniform_(-0.1, 0.1)
    model.eval()
    example = torch.randn(1, 3, 224, 224)
    kwargs = dict(input_names=["input"], output_names=["logits"], opset_version=17, do_constant_folding=True)
    try:  # torch >= 2.9 defaults to the dynamo exporter, which needs onnxscript
        torch.onnx.export(model, (example,), str(path), dynamo=False, **kwargs)
        exporter = "torch.onnx.export(dynamo=False)"
    except TypeError:  # older torch: no dynamo argument
        torch.onnx.export(model, (example,), str(path), **kwargs)
        exporter = "torch.onnx.export"
    params = sum(p.numel() for p in model.parameters())
    return {"input": "1x3x224x224 float32 (NCHW)", "params": params, "exporter": exporter,
            "torch": torch.__version__}


def make_keras_cnn(path: Path) -> dict:
    """A MobileNet-like Keras CNN with He-scaled weights and random BN statistics (no vanishing activations)."""
    import numpy as np
    import tensorflow as tf

    tf.get_logger().setLevel("ERROR")
    keras = tf.keras
    keras.utils.set_random_seed(SEED)
    L = keras.layers
    he = "he_normal"
    # Keras computes a depthwise kernel's fan-in over all channels; a 3x3 depthwise filter has 9 inputs.
    dw = keras.initializers.RandomNormal(stddev=(2.0 / 9) ** 0.5)
    inp = keras.Input(shape=(224, 224, 3), batch_size=1, name="input")
    x = L.Conv2D(32, 3, strides=2, padding="same", use_bias=False, kernel_initializer=he)(inp)
    x = L.BatchNormalization()(x)
    x = L.ReLU(6.0)(x)
    for filters, stride in [(64, 1), (128, 2), (128, 1), (256, 2), (256, 1), (512, 2)]:
        x = L.DepthwiseConv2D(3, strides=stride, padding="same", use_bias=False, depthwise_initializer=dw)(x)
        x = L.BatchNormalization()(x)
        x = L.ReLU(6.0)(x)
        x = L.Conv2D(filters, 1, padding="same", use_bias=False, kernel_initializer=he)(x)
        x = L.BatchNormalization()(x)
        x = L.ReLU(6.0)(x)
    x = L.MaxPooling2D(2)(x)
    x = L.AveragePooling2D(2, padding="same")(x)
    x = L.GlobalAveragePooling2D()(x)
    x = L.Dense(256, activation="relu", kernel_initializer=he)(x)
    out = L.Dense(1000, activation="softmax", name="probs")(x)
    model = keras.Model(inp, out)
    rng = np.random.default_rng(SEED)
    for layer in model.layers:  # weights order: gamma, beta, moving mean, moving variance
        if isinstance(layer, L.BatchNormalization):
            c = layer.gamma.shape[0]
            layer.set_weights([rng.uniform(0.5, 1.5, c), rng.uniform(-0.1, 0.1, c),
                               rng.uniform(-0.1, 0.1, c), rng.uniform(0.5, 1.5, c)])
    try:
        converter = tf.lite.TFLiteConverter.from_keras_model(model)
        blob = converter.convert()
        how = "TFLiteConverter.from_keras_model"
    except Exception:  # Keras 3 variants where from_keras_model fails: go through a concrete function
        fn = tf.function(lambda x: model(x, training=False))
        concrete = fn.get_concrete_function(tf.TensorSpec([1, 224, 224, 3], tf.float32, name="input"))
        blob = tf.lite.TFLiteConverter.from_concrete_functions([concrete], model).convert()
        how = "TFLiteConverter.from_concrete_functions"
    path.write_bytes(blob)
    return {"input": "1x224x224x3 float32 (NHWC)", "params": int(model.count_params()), "converter": how,
            "tensorflow": tf.__version__}


MAKERS = {"builtin": make_builtin, "torch": make_torch_mobilenetv2, "keras": make_keras_cnn}


# =========================================================================== worker modes

def _preimport(model_file: Path) -> None:
    """Load the Python modules a compile needs, so compile time is the model's, not Python's imports."""
    import tvm  # noqa: F401
    from tvm import relax  # noqa: F401

    import tvmgen.compiler.build  # noqa: F401
    import tvmgen.frontends  # noqa: F401

    if model_file.suffix == ".onnx":
        import onnx  # noqa: F401
        import onnxslim  # noqa: F401
        import tvm.relax.frontend.onnx  # noqa: F401

        import tvmgen.frontends.onnx  # noqa: F401
    else:
        import tflite  # noqa: F401
        import tvm.relax.frontend.tflite  # noqa: F401

        import tvmgen.frontends.tflite  # noqa: F401


def worker_compile(model_file: Path, out_dir: Path) -> dict:
    from tvmgen import frontends
    from tvmgen.artifact import sha256_file
    from tvmgen.compiler import build
    from tvmgen.compiler.platforms import PLATFORMS

    _preimport(model_file)
    t0 = time.perf_counter()
    imported = frontends.load(model_file, [])
    t1 = time.perf_counter()
    info = {"name": model_file.stem, "source": str(model_file), "format": imported.format,
            "sha256": sha256_file(model_file)}
    manifest = build.compile_to_artifact(imported, build.BuildOptions(PLATFORMS["host"], "cpu"), out_dir,
                                         True, info)
    t2 = time.perf_counter()
    files = {p.relative_to(out_dir).as_posix(): p.stat().st_size for p in out_dir.rglob("*") if p.is_file()}
    return {"import_s": t1 - t0, "build_export_s": t2 - t1, "compile_s": t2 - t0,
            "artifact_bytes": sum(files.values()), "files": files,
            "inputs": [s.to_json() for s in imported.inputs],
            "outputs": [s.to_json() for s in manifest.outputs],
            "target": manifest.target, "reference": imported.reference_name}


def _stats(times_ms: list[float]) -> dict:
    import numpy as np

    a = np.array(times_ms)
    return {"median_ms": float(np.median(a)), "mean_ms": float(a.mean()), "min_ms": float(a.min()),
            "max_ms": float(a.max()), "p90_ms": float(np.percentile(a, 90)), "runs": len(times_ms)}


def _inputs(artifact_dir: Path) -> dict:
    from tvmgen import artifact
    from tvmgen.frontends.base import random_inputs

    return random_inputs(artifact.load(artifact_dir).inputs, SEED)


def _keep_going(done: int, runs: int, started: float, min_time: float) -> bool:
    """At least `runs` timed runs and at least `min_time` seconds of them (capped at 20 x runs)."""
    return done < runs or (time.perf_counter() - started < min_time and done < 20 * runs)


def worker_tvm(artifact_dir: Path, threads: int, warmup: int, runs: int, min_time: float, save: Path) -> dict:
    import numpy as np
    import tvm

    from tvmgen.runner import HostModel

    inputs = _inputs(artifact_dir)
    model = HostModel(artifact_dir)
    # The first call starts the thread pool (and reads TVM_NUM_THREADS); it is the "first run".
    model.run(inputs, repeat=max(1, warmup))
    pool = int(tvm.get_global_func("runtime.NumThreads")())
    model.timings.runs_ms.clear()
    started, outputs = time.perf_counter(), None
    while _keep_going(len(model.timings.runs_ms), runs, started, min_time):
        outputs = model.run(inputs)  # HostModel times each call itself (timings.runs_ms)
    np.savez(save, *outputs)
    t = model.timings
    return {"runtime": f"TVM {tvm.__version__} Relax VM", "threads_requested": threads, "threads_actual": pool,
            "load_ms": t.load_ms, "init_ms": t.init_ms, "first_run_ms": t.first_run_ms, **_stats(t.runs_ms)}


def worker_onnxruntime(model_file: Path, artifact_dir: Path, threads: int, warmup: int, runs: int,
                       min_time: float, save: Path) -> dict:
    import numpy as np
    import onnxruntime as ort

    inputs = _inputs(artifact_dir)
    opts = ort.SessionOptions()
    opts.log_severity_level = 3
    opts.intra_op_num_threads = threads
    opts.inter_op_num_threads = 1
    opts.execution_mode = ort.ExecutionMode.ORT_SEQUENTIAL
    t0 = time.perf_counter()
    sess = ort.InferenceSession(str(model_file), opts, providers=["CPUExecutionProvider"])
    load_ms = (time.perf_counter() - t0) * 1e3
    feeds = {i.name: inputs[i.name] for i in sess.get_inputs()}
    for _ in range(max(1, warmup)):
        sess.run(None, feeds)
    times, out, started = [], None, time.perf_counter()
    while _keep_going(len(times), runs, started, min_time):
        t0 = time.perf_counter()
        out = sess.run(None, feeds)
        times.append((time.perf_counter() - t0) * 1e3)
    np.savez(save, *out)
    return {"runtime": f"onnxruntime {ort.__version__}", "threads_requested": threads,
            "threads_actual": sess.get_session_options().intra_op_num_threads, "load_ms": load_ms,
            **_stats(times)}


def worker_litert(model_file: Path, artifact_dir: Path, threads: int, warmup: int, runs: int,
                  min_time: float, save: Path) -> dict:
    from importlib.metadata import version

    import numpy as np
    from ai_edge_litert.interpreter import Interpreter

    inputs = _inputs(artifact_dir)
    t0 = time.perf_counter()
    interp = Interpreter(model_path=str(model_file), num_threads=threads)
    interp.allocate_tensors()
    load_ms = (time.perf_counter() - t0) * 1e3
    in_details = interp.get_input_details()
    names = list(inputs)
    feeds = [(d["index"], inputs[d["name"]] if d["name"] in inputs else inputs[names[k]])
             for k, d in enumerate(in_details)]
    out_idx = [d["index"] for d in interp.get_output_details()]
    def once():
        for idx, arr in feeds:
            interp.set_tensor(idx, arr)
        interp.invoke()
        return [interp.get_tensor(j) for j in out_idx]

    for _ in range(max(1, warmup)):
        once()
    times, out, started = [], None, time.perf_counter()
    while _keep_going(len(times), runs, started, min_time):
        t0 = time.perf_counter()
        out = once()
        times.append((time.perf_counter() - t0) * 1e3)
    np.savez(save, *out)
    return {"runtime": f"LiteRT {version('ai-edge-litert')} (XNNPACK)", "threads_requested": threads,
            "threads_actual": threads, "load_ms": load_ms, **_stats(times)}


def run_worker(args) -> None:
    # Whatever TVM, TensorFlow or LiteRT print goes to stderr; stdout carries only the JSON result.
    result_fd = os.dup(1)
    os.dup2(2, 1)
    sys.stdout = sys.stderr
    kind, a = args.worker, args
    if kind == "make":
        result = MAKERS[a.maker](Path(a.model_file))
    elif kind == "compile":
        result = worker_compile(Path(a.model_file), Path(a.artifact))
    elif kind == "tvm":
        result = worker_tvm(Path(a.artifact), a.threads, a.warmup, a.runs, a.min_time, Path(a.save))
    elif kind == "onnxruntime":
        result = worker_onnxruntime(Path(a.model_file), Path(a.artifact), a.threads, a.warmup, a.runs, a.min_time,
                                    Path(a.save))
    elif kind == "litert":
        result = worker_litert(Path(a.model_file), Path(a.artifact), a.threads, a.warmup, a.runs, a.min_time,
                               Path(a.save))
    else:
        raise SystemExit(f"unknown worker {kind}")
    sys.stderr.flush()
    with os.fdopen(result_fd, "w") as f:
        f.write(json.dumps(result) + "\n")


# =========================================================================== driver

class WorkerError(RuntimeError):
    pass


def call_worker(mode: str, env_threads: int, verbose: bool, **kw) -> dict:
    argv = [sys.executable, str(Path(__file__).resolve()), "--worker", mode]
    for k, v in kw.items():
        argv += [f"--{k.replace('_', '-')}", str(v)]
    env = dict(os.environ, TVM_NUM_THREADS=str(env_threads), OMP_NUM_THREADS=str(env_threads),
               TF_CPP_MIN_LOG_LEVEL="3", TF_ENABLE_ONEDNN_OPTS="0", PYTHONUNBUFFERED="1")
    proc = subprocess.run(argv, env=env, cwd=ROOT, stdout=subprocess.PIPE,
                          stderr=None if verbose else subprocess.PIPE, text=True)
    if proc.returncode != 0:
        tail = "\n".join((proc.stderr or "").strip().splitlines()[-25:])
        raise WorkerError(f"worker {mode} {kw} failed (exit {proc.returncode}):\n{tail}")
    try:
        return json.loads(proc.stdout.strip().splitlines()[-1])
    except (IndexError, ValueError) as e:
        raise WorkerError(f"worker {mode} {kw} returned no JSON result ({e}): {proc.stdout[-500:]!r}") from e


def output_error(tvm_path: Path, ref_path: Path) -> dict:
    """Largest absolute difference between tvmgen's and the reference's outputs, and the reference's scale."""
    import numpy as np

    a, b = np.load(tvm_path), np.load(ref_path)
    if len(a.files) != len(b.files):
        return {"max_abs": None, "ref_max": None, "ok": False, "note": f"{len(a.files)} vs {len(b.files)} outputs"}
    worst, scale = 0.0, 0.0
    for ka, kb in zip(a.files, b.files):
        x, y = a[ka].astype(np.float64).ravel(), b[kb].astype(np.float64).ravel()
        if x.size != y.size:
            return {"max_abs": None, "ref_max": None, "ok": False, "note": f"sizes {x.size} vs {y.size}"}
        worst = max(worst, float(np.abs(x - y).max()))
        scale = max(scale, float(np.abs(y).max()))
    # the same default tolerance as `tvmgen compile --check`
    return {"max_abs": worst, "ref_max": scale, "ok": worst <= 1e-4 + 1e-3 * scale}


def bench_model(name: str, work: Path, args) -> dict:
    maker, suffix, ref = MODELS[name]
    model_file = work / f"{name}{suffix}"
    artifact_dir = work / f"{name}-host-cpu"
    entry: dict = {"model": name, "reference_runtime": ref, "rows": []}

    progress(f"{name}: making the model ({maker})")
    t0 = time.perf_counter()
    entry["model_info"] = call_worker("make", 1, args.verbose, maker=maker, model_file=model_file)
    entry["model_file_bytes"] = model_file.stat().st_size
    progress(f"{name}: {model_file.name} {model_file.stat().st_size / 1e6:.1f} MB in {time.perf_counter() - t0:.1f}s")

    progress(f"{name}: compiling with tvmgen (import + build + export) ...")
    comp = call_worker("compile", 1, args.verbose, model_file=model_file, artifact=artifact_dir)
    entry["compile"] = comp
    progress(f"{name}: compiled in {comp['compile_s']:.1f}s (import {comp['import_s']:.1f}s, "
             f"build+export {comp['build_export_s']:.1f}s), artifact {comp['artifact_bytes'] / 1e6:.2f} MB")

    for threads in args.threads:
        common = dict(artifact=artifact_dir, threads=threads, warmup=args.warmup, runs=args.runs,
                      min_time=args.min_time)
        progress(f"{name}: tvmgen, {threads} thread(s), {args.warmup} warm-up + >= {args.runs} runs ...")
        tvm_res = call_worker("tvm", threads, args.verbose, save=work / f"{name}-tvm-{threads}.npz", **common)
        progress(f"{name}: tvmgen {tvm_res['median_ms']:.2f} ms (TVM pool: {tvm_res['threads_actual']} thread(s))")
        progress(f"{name}: {ref}, {threads} thread(s) ...")
        ref_res = call_worker(ref, threads, args.verbose, model_file=model_file,
                              save=work / f"{name}-ref-{threads}.npz", **common)
        progress(f"{name}: {ref} {ref_res['median_ms']:.2f} ms")
        err = output_error(work / f"{name}-tvm-{threads}.npz", work / f"{name}-ref-{threads}.npz")
        if not err["ok"]:
            progress(f"{name}: WARNING: tvmgen and {ref} outputs differ: {err}")
        entry["rows"].append({
            "model": name, "threads": threads, "compile_s": comp["compile_s"],
            "artifact_bytes": comp["artifact_bytes"], "tvmgen_ms": tvm_res["median_ms"],
            "tvm_threads_actual": tvm_res["threads_actual"], "reference": ref,
            "reference_runtime": ref_res["runtime"], "reference_ms": ref_res["median_ms"],
            "ratio": tvm_res["median_ms"] / ref_res["median_ms"], "max_abs_diff": err["max_abs"],
            "outputs_match": err["ok"],
            "tvmgen": tvm_res, "reference_stats": ref_res,
        })
    return entry


def format_table(rows: list[dict]) -> str:
    header = ["model", "threads", "compile s", "artifact MB", "tvmgen ms", "reference", "reference ms", "ratio"]
    right = {1, 2, 3, 4, 6, 7}
    body = []
    for r in rows:
        threads = str(r["threads"])
        if r["tvm_threads_actual"] != r["threads"]:
            threads += f" (tvm {r['tvm_threads_actual']})"
        body.append([r["model"], threads, f"{r['compile_s']:.1f}", f"{r['artifact_bytes'] / 1e6:.2f}",
                     f"{r['tvmgen_ms']:.2f}", r["reference"], f"{r['reference_ms']:.2f}", f"{r['ratio']:.1f}x"])
    return benchlib.table(header, body, right)


def environment() -> dict:
    return benchlib.environment(("apache-tvm", "apache-tvm-ffi", "onnxruntime", "ai-edge-litert", "torch", "tensorflow-cpu", "tensorflow", "onnx", "onnxslim", "tflite"))


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0],
                                formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--quick", action="store_true", help="smoke test: 1 warm-up and 5 timed runs")
    p.add_argument("--json", type=Path, metavar="OUT.json", help="also write every measurement as JSON here")
    p.add_argument("--runs", type=int, help="timed runs per measurement (default 50, --quick 5)")
    p.add_argument("--warmup", type=int, help="untimed runs first (default 5, --quick 1)")
    p.add_argument("--min-time", type=float,
                   help="keep timing until this many seconds have passed too, up to 20 x --runs "
                        "(default 2, --quick 0): fast reference runs get a wider window against noise")
    p.add_argument("--threads", default="1,2", help="comma-separated thread counts (default 1,2)")
    p.add_argument("--models", default=",".join(MODELS), help=f"comma-separated subset of {', '.join(MODELS)}")
    p.add_argument("--keep", type=Path, metavar="DIR", help="make models and artifacts in DIR and keep them")
    p.add_argument("-v", "--verbose", action="store_true", help="show the children's own stderr")
    # hidden worker mode: one step in a fresh process (see call_worker)
    p.add_argument("--worker", help=argparse.SUPPRESS)
    for hidden in ("--maker", "--model-file", "--artifact", "--save"):
        p.add_argument(hidden, help=argparse.SUPPRESS)
    args = p.parse_args()

    if args.worker:
        args.threads = int(args.threads) if args.threads.isdigit() else 1
        args.warmup, args.runs = int(args.warmup or 0), int(args.runs or 0)
        args.min_time = float(args.min_time or 0)
        run_worker(args)
        return 0

    args.runs = args.runs or (5 if args.quick else 50)
    args.warmup = args.warmup if args.warmup is not None else (1 if args.quick else 5)
    args.min_time = args.min_time if args.min_time is not None else (0.0 if args.quick else 2.0)
    args.threads = [int(t) for t in args.threads.split(",") if t.strip()]
    names = [m.strip() for m in args.models.split(",") if m.strip()]
    unknown = [m for m in names if m not in MODELS]
    if unknown:
        p.error(f"unknown model(s) {unknown}; choose from {list(MODELS)}")

    if args.keep:
        args.keep.mkdir(parents=True, exist_ok=True)
        work = args.keep.resolve()
    else:
        work = Path(tempfile.mkdtemp(prefix="tvmgen-bench-"))
    load_start = os.getloadavg()
    if load_start[0] > 0.5:
        progress(f"note: load average is {load_start[0]:.2f} before starting; other processes will add noise")
    start = time.perf_counter()
    results, failures = [], []
    try:
        for name in names:
            try:
                results.append(bench_model(name, work, args))
            except WorkerError as e:
                failures.append({"model": name, "error": str(e)})
                progress(f"{name}: FAILED\n{e}")
    finally:
        if not args.keep:
            shutil.rmtree(work, ignore_errors=True)
    total = time.perf_counter() - start
    rows = [r for m in results for r in m["rows"]]
    progress(f"done in {total:.0f}s")

    if rows:
        window = f" and >= {args.min_time:g} s" if args.min_time else ""
        print(f"tvmgen compile baseline (host/cpu, untuned TVM; median of >= {args.runs} runs{window} after "
              f"{args.warmup} warm-up; ratio = tvmgen / reference)")
        print(format_table(rows))
        bad = [f"{r['model']}/{r['threads']}" for r in rows if not r["outputs_match"]]
        print("outputs: tvmgen " + (f"DIFFERS from the reference for {', '.join(bad)}" if bad else
                                    "matches the reference on every row (tolerance of tvmgen compile --check)"))
    for f in failures:
        print(f"{f['model']}: FAILED ({f['error'].splitlines()[0]})")

    if args.json:
        doc = {"benchmark": "compile_baseline", "created": time.strftime("%Y-%m-%dT%H:%M:%S%z"),
               "settings": {"runs": args.runs, "warmup": args.warmup, "min_time_s": args.min_time,
                            "threads": args.threads,
                            "quick": args.quick, "seed": SEED},
               "environment": {**environment(), "loadavg_start": load_start, "loadavg_end": os.getloadavg()},
               "total_s": total,
               "rows": [{k: v for k, v in r.items() if k not in ("tvmgen", "reference_stats")} for r in rows],
               "models": results, "failures": failures}
        args.json.write_text(json.dumps(doc, indent=2) + "\n")
        progress(f"JSON written to {args.json}")
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main())
