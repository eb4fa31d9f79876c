#!/usr/bin/env python3
"""CPU speed: tvmgen's compiled models against onnxruntime, LiteRT and numpy/OpenBLAS on the host.

For five models, all made here (nothing is downloaded):

  builtin-mobilenet   tvmgen.frontends.builtin.mobilenet_onnx() (MobileNet v1 style, width 0.5), ONNX, 1x3x224x224
  mobilenetv2-torch   a MobileNetV2 (inverted residuals, width 1.0) written in torch, exported to ONNX
                      with torch.onnx.export (TorchScript exporter), 1x3x224x224
  keras-cnn-tflite    a small Keras CNN (Conv2D, DepthwiseConv2D, pooling, Dense) converted with
                      tf.lite.TFLiteConverter, 1x224x224x3
  gemm                an ONNX MatMul of two 1024x1024 float32 inputs (--gemm-size)
  ffn-int8            a transformer feed-forward block (16 tokens, 768 -> 3072 -> 768, ReLU), ONNX,
                      quantised to 8 bits by onnxruntime.quantization.quantize_dynamic (the
                      activations quantised at run time, MatMulInteger): the dot-product path

it compiles each for host/cpu with tvmgen's default schedules, optionally with a tuning database
(--tuning-db) and with TVM's own unscheduled pipeline (--with-unscheduled), then measures the
median latency of every build and of the model's reference runtime (onnxruntime for ONNX, LiteRT
for TFLite, numpy/OpenBLAS for the GEMM) at 1 and 2 threads, with ratios tvmgen / reference,
and checks that every build's outputs match the reference's.

"Same process, same thread counts": per model and thread count, one child process (this script
in a hidden --worker mode, started with TVM_NUM_THREADS, OMP_NUM_THREADS and OPENBLAS_NUM_THREADS
set, since TVM's pool reads its variable once) loads every runtime, then times them round-robin:
in each of --rounds rounds every runtime runs a block of timed runs, the starting runtime
rotating, so a burst of other load hits all of them alike. Before each block the script waits
until the previous runtime's worker threads have stopped spinning (TVM's spin ~0.3 s after a
parallel run), then does one untimed run. The child reports the pool size TVM really got
(runtime.NumThreads). Making the models and compiling happen in children of their own
(TensorFlow and torch never share a process).

    .venv/bin/python benchmarks/cpu_speed.py                      # full run, about 3 minutes on 2 cores
    .venv/bin/python benchmarks/cpu_speed.py --quick              # smoke test: 1 warm-up, 5 runs in 2 rounds
    .venv/bin/python benchmarks/cpu_speed.py --json out.json --tuning-db ~/.local/state/tvmgen/tuning

The table goes to stdout; progress goes to stderr.
"""

from __future__ import annotations

import argparse
import importlib.util
import json
import os
import sys
import time
from pathlib import Path

import benchlib
from benchlib import progress

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "3")
os.environ.setdefault("TF_ENABLE_ONEDNN_OPTS", "0")

SEED = 0
ATOL, RTOL = 1e-4, 1e-3  # the defaults of `tvmgen compile --check`

# name -> (how the model file is made, file suffix, reference runtime)
MODELS = {
    "builtin-mobilenet": ("builtin", ".onnx", "onnxruntime"),
    "mobilenetv2-torch": ("torch", ".onnx", "onnxruntime"),
    "keras-cnn-tflite": ("keras", ".tflite", "litert"),
    "gemm": ("gemm", ".onnx", "numpy"),
    "ffn-int8": ("int8", ".onnx", "onnxruntime"),
}

# tvmgen builds: name -> column label. "default" always; the others on request.
VARIANTS = {"default": "tvmgen", "tuned": "tuned", "unscheduled": "unscheduled"}


# =========================================================================== model makers


def make_builtin(path: Path) -> dict:
    import onnx

    from tvmgen.frontends.builtin import mobilenet_onnx

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
    return {"input": "1x3x224x224 float32 (NCHW)", "params": params, "exporter": exporter, "torch": torch.__version__}


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
            layer.set_weights(
                [
                    rng.uniform(0.5, 1.5, c),
                    rng.uniform(-0.1, 0.1, c),
                    rng.uniform(-0.1, 0.1, c),
                    rng.uniform(0.5, 1.5, c),
                ]
            )
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
    return {
        "input": "1x224x224x3 float32 (NHWC)",
        "params": int(model.count_params()),
        "converter": how,
        "tensorflow": tf.__version__,
    }


def make_gemm(path: Path, size: int) -> dict:
    """Y = A @ B with A and B both inputs, so no side can pre-pack a constant operand."""
    import onnx
    from onnx import TensorProto, helper

    n = size
    graph = helper.make_graph(
        [helper.make_node("MatMul", ["A", "B"], ["Y"])],
        f"gemm{n}",
        [
            helper.make_tensor_value_info("A", TensorProto.FLOAT, [n, n]),
            helper.make_tensor_value_info("B", TensorProto.FLOAT, [n, n]),
        ],
        [helper.make_tensor_value_info("Y", TensorProto.FLOAT, [n, n])],
    )
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    model.ir_version = 8
    onnx.save(model, str(path))
    return {"input": f"A, B: {n}x{n} float32", "flops": 2 * n**3}


def make_int8_ffn(path: Path) -> dict:
    """A float feed-forward block, then onnxruntime's own dynamic quantiser: 8-bit weights, 8-bit
    activations quantised per run (DynamicQuantizeLinear), int32 MatMulInteger."""
    import numpy as np
    import onnx
    from onnx import TensorProto, helper, numpy_helper
    from onnxruntime.quantization import QuantType, quantize_dynamic

    tokens, width, hidden = 16, 768, 3072
    rng = np.random.default_rng(SEED)

    def const(name, *shape, scale=1.0):
        return numpy_helper.from_array((rng.standard_normal(shape) * scale).astype(np.float32), name)

    inits = [
        const("w1", width, hidden, scale=width**-0.5),
        const("b1", hidden, scale=0.1),
        const("w2", hidden, width, scale=hidden**-0.5),
        const("b2", width, scale=0.1),
    ]
    nodes = [
        helper.make_node("MatMul", ["x", "w1"], ["h"]),
        helper.make_node("Add", ["h", "b1"], ["hb"]),
        helper.make_node("Relu", ["hb"], ["r"]),
        helper.make_node("MatMul", ["r", "w2"], ["o"]),
        helper.make_node("Add", ["o", "b2"], ["y"]),
    ]
    graph = helper.make_graph(
        nodes,
        "ffn",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, [tokens, width])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, [tokens, width])],
        inits,
    )
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    model.ir_version = 8
    fp32 = path.with_suffix(".fp32.onnx")
    onnx.save(model, str(fp32))
    quantize_dynamic(str(fp32), str(path), weight_type=QuantType.QInt8)
    fp32.unlink()
    return {
        "input": f"{tokens}x{width} float32",
        "quantizer": "onnxruntime.quantization.quantize_dynamic (QInt8)",
        "macs": 2 * tokens * width * hidden,
    }


MAKERS = {
    "builtin": make_builtin,
    "torch": make_torch_mobilenetv2,
    "keras": make_keras_cnn,
    "int8": make_int8_ffn,
}  # gemm: its size too


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

    from tvmgen.runtime.runner import HostModel

    model = HostModel(artifact_dir)
    # The first call starts TVM's thread pool, which reads TVM_NUM_THREADS then.
    model.run(inputs)
    pool = int(tvm.get_global_func("runtime.NumThreads")())
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
    settled = benchlib.round_robin(runtimes, spec["warmup"], runs, rounds, min_time)

    out = {"threads_requested": threads, "rounds": rounds, "settle_s": settled, "runtimes": {}}
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
    if mode == "make":
        path = Path(spec["model_file"])
        if spec["maker"] == "gemm":
            return make_gemm(path, spec["gemm_size"])
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


# =========================================================================== driver


def call_worker(mode: str, env_threads: int, verbose: bool, **spec) -> dict:
    """Run this script's ``--worker mode`` in a fresh process with the thread variables set to ``env_threads``."""
    argv = [sys.executable, str(Path(__file__).resolve()), "--worker", mode, "--spec", json.dumps(spec, default=str)]
    env = benchlib.thread_env(
        env_threads, OPENBLAS_NUM_THREADS=str(env_threads), TF_CPP_MIN_LOG_LEVEL="3", TF_ENABLE_ONEDNN_OPTS="0"
    )
    what = f"worker {mode} {spec.get('variant') or spec.get('maker') or ''}".strip()
    return benchlib.last_json(benchlib.run_step(argv, env, verbose, what), what)


def label(name: str, args) -> str:
    return f"gemm-{args.gemm_size}^3" if name == "gemm" else name


def bench_model(name: str, work: Path, args) -> dict:
    maker, suffix, ref = MODELS[name]
    model_file = work / f"{name}{suffix}"
    entry: dict = {
        "model": name,
        "label": label(name, args),
        "reference_runtime": ref,
        "compile": {},
        "skipped": {},
        "rows": [],
    }

    progress(f"{name}: making the model ({maker})")
    t0 = time.perf_counter()
    entry["model_info"] = call_worker(
        "make", 1, args.verbose, maker=maker, model_file=model_file, gemm_size=args.gemm_size
    )
    entry["model_file_bytes"] = model_file.stat().st_size
    progress(f"{name}: {model_file.name} {model_file.stat().st_size / 1e6:.1f} MB in {time.perf_counter() - t0:.1f}s")

    # build name -> (variant, database, artifact); a tuned build per database (one per thread count at most)
    builds: dict[str, tuple[str, Path | None, Path]] = {}
    for variant in args.variants:
        dbs = sorted(set(args.tuning_dbs.values()), key=str) if variant == "tuned" else [None]
        for k, db in enumerate(dbs):
            build = variant if len(dbs) == 1 else f"tuned ({tuned_label(args, db)})"
            builds[build] = (variant, db, work / (f"{name}-{variant}" + (f"-{k}" if len(dbs) > 1 else "")))
    artifacts = {}
    for build, (variant, db, out) in builds.items():
        progress(f"{name}: compiling ({build}) ...")
        try:
            comp = call_worker(
                "compile", 1, args.verbose, model_file=model_file, artifact=out, variant=variant, tuning_db=db
            )
        except benchlib.StepError as e:  # e.summary: tvmgen's error and fix, else the last line
            if variant == "default":
                raise
            entry["skipped"][build] = e.summary
            progress(f"{name}: no {build} build, so no {variant} column for it:\n{e.summary}")
            continue
        entry["compile"][build] = comp
        artifacts[build] = out
        progress(f"{name}: {build} compiled in {comp['compile_s']:.1f}s, {comp['artifact_bytes'] / 1e6:.2f} MB")

    flops = entry["model_info"].get("flops")
    for threads in args.threads:
        progress(
            f"{name}: {threads} thread(s): {', '.join(artifacts)} and {ref}, {args.warmup} warm-up, "
            f"then >= {args.runs} runs each in {args.rounds} round-robin rounds ..."
        )
        load = os.getloadavg()[0]
        # this thread count's tuned build is the "tuned" column
        own = {b: a for b, a in artifacts.items() if builds[b][0] != "tuned"}
        tuned = [a for b, a in artifacts.items() if builds[b][0] == "tuned" and builds[b][1] == db_for(args, threads)]
        if tuned:
            own["tuned"] = tuned[-1]
        m = call_worker(
            "measure",
            threads,
            args.verbose,
            model_file=model_file,
            reference=ref,
            threads=threads,
            artifacts=own,
            warmup=args.warmup,
            runs=args.runs,
            rounds=args.rounds,
            min_time=args.min_time,
        )
        rts = m["runtimes"]
        ref_ms = rts[ref]["median_ms"]
        row = {
            "model": name,
            "label": entry["label"],
            "threads": threads,
            "tvm_threads_actual": rts["default"]["threads_actual"],
            "reference": ref,
            "reference_runtime": rts[ref]["runtime"],
            "reference_ms": ref_ms,
            "reference_threads_actual": rts[ref]["threads_actual"],
            "rounds": m["rounds"],
            "loadavg_1min_before": load,
            "tvmgen": {},
        }
        for variant in own:
            r = rts[variant]
            row["tvmgen"][variant] = {
                "median_ms": r["median_ms"],
                "ratio": benchlib.ratio(r["median_ms"], ref_ms),
                "max_abs_diff": r["outputs"]["max_abs_diff"],
                "outputs_match": r["outputs"]["ok"],
            }
            if not r["outputs"]["ok"]:
                progress(f"{name}: WARNING: tvmgen {variant} and {ref} outputs differ: {r['outputs']['per_output']}")
        row["tvmgen_ms"], row["ratio"] = row["tvmgen"]["default"]["median_ms"], row["tvmgen"]["default"]["ratio"]
        row["outputs_match"] = all(v["outputs_match"] for v in row["tvmgen"].values())
        if flops:
            row["gflops"] = {k: flops / (r["median_ms"] * 1e6) for k, r in rts.items()}
        row["stats"] = rts
        entry["rows"].append(row)
        progress(
            f"{name}: {threads} thread(s): "
            + ", ".join(f"{k} {r['median_ms']:.2f} ms" for k, r in rts.items())
            + f" (TVM pool: {row['tvm_threads_actual']})"
        )
    return entry


def db_for(args, threads: int) -> Path | None:
    """The tuning database of the rows with this thread count: its own, else the one for every row."""
    return args.tuning_dbs.get(threads, args.tuning_dbs.get(None))


def tuned_label(args, db: Path) -> str:
    """Which thread counts a tuned build is timed at, e.g. "1 thread" or "2 threads"."""
    counts = [t for t in args.threads if db_for(args, t) == db]
    return (", ".join(map(str, counts)) + (" thread" if counts == [1] else " threads")) if counts else "unused"


def parse_tuning_dbs(values: list[str], threads: list[int], error) -> dict:
    """--tuning-db DIR (every thread count) and --tuning-db N=DIR (N threads) -> {N or None: DIR}."""
    dbs: dict = {}
    for value in values:
        count, sep, path = value.partition("=")
        key = None
        if sep and count.strip().isdigit():
            key = int(count)
            if key not in threads:
                error(f"--tuning-db {value}: {key} is not one of the thread counts measured ({threads})")
        else:
            path = value
        if key in dbs:
            error(f"--tuning-db given twice for {'every thread count' if key is None else f'{key} threads'}")
        db = Path(path).expanduser()
        if not db.is_dir():
            error(f"--tuning-db {db} is not a directory (make one with: tvmgen tune MODEL --db DIR)")
        dbs[key] = db.resolve()
    return dbs


def format_table(rows: list[dict], variants: list[str]) -> str:
    shown = [v for v in variants if any(v in r["tvmgen"] for r in rows)]
    header = [
        "model",
        "threads",
        *(f"{VARIANTS[v]} ms" for v in shown),
        "reference",
        "reference ms",
        *(f"{VARIANTS[v]}/ref" for v in shown),
        "outputs",
    ]
    right = set(range(1, 2 + len(shown))) | set(range(3 + len(shown), 4 + 2 * len(shown)))
    body = []
    for r in rows:
        threads = str(r["threads"])
        if r["tvm_threads_actual"] != r["threads"]:
            threads += f" (tvm {r['tvm_threads_actual']})"
        cells = [r["tvmgen"].get(v) for v in shown]
        worst = max(c["max_abs_diff"] for c in cells if c)
        body.append(
            [
                r["label"],
                threads,
                *(f"{c['median_ms']:.2f}" if c else "-" for c in cells),
                r["reference"],
                f"{r['reference_ms']:.2f}",
                *(f"{c['ratio']:.2f}x" if c else "-" for c in cells),
                f"{'ok' if r['outputs_match'] else 'DIFFERS'} ({worst:.1g})",
            ]
        )
    return benchlib.table(header, body, right)


def format_compile_table(results: list[dict]) -> str:
    body = [
        [m["label"], v, f"{c['compile_s']:.1f}", f"{c['artifact_bytes'] / 1e6:.2f}"]
        for m in results
        for v, c in m["compile"].items()
    ]
    return benchlib.table(["model", "build", "compile s", "artifact MB"], body, {2, 3})


def environment() -> dict:
    return benchlib.environment(
        (
            "apache-tvm",
            "apache-tvm-ffi",
            "onnxruntime",
            "ai-edge-litert",
            "numpy",
            "threadpoolctl",
            "torch",
            "tensorflow-cpu",
            "tensorflow",
            "onnx",
            "onnxslim",
            "tflite",
        )
    )


def main() -> int:
    p = benchlib.parser(__doc__)
    p.add_argument("--quick", action="store_true", help="smoke test: 1 warm-up, 5 timed runs in 2 rounds")
    benchlib.json_option(p)
    p.add_argument(
        "--tuning-db",
        action="append",
        default=[],
        metavar="[N=]DIR",
        help="add a tuned column: compile with this `tvmgen tune` database (its root directory); "
        "N=DIR uses it for the N-thread rows only (tune once per thread count: "
        "--tuning-db 1=db-1t --tuning-db 2=db-2t)",
    )
    p.add_argument(
        "--with-unscheduled",
        action="store_true",
        help="add TVM's own unscheduled pipeline (the old baseline; 20-80x slower, so slow to time)",
    )
    p.add_argument("--runs", type=int, help="timed runs of each runtime, at least (default 50, --quick 5)")
    p.add_argument("--rounds", type=int, help="round-robin rounds the runs are split into (default 10, --quick 2)")
    p.add_argument("--warmup", type=int, help="untimed runs of each runtime first (default 5, --quick 1)")
    p.add_argument(
        "--min-time",
        type=float,
        help="time each runtime for about this many seconds too, up to 20 x --runs runs "
        "(default 2, --quick 0): fast runtimes get a wider window against noise",
    )
    p.add_argument("--threads", default="1,2", help="comma-separated thread counts (default 1,2)")
    benchlib.models_option(p, MODELS)
    p.add_argument("--gemm-size", type=int, default=1024, help="N of the N x N x N GEMM (default 1024)")
    p.add_argument("--keep", type=Path, metavar="DIR", help="make models and artifacts in DIR and keep them")
    p.add_argument("-v", "--verbose", action="store_true", help="show the children's own stderr")
    # hidden worker mode: one step in a fresh process (see call_worker)
    p.add_argument("--worker", help=argparse.SUPPRESS)
    p.add_argument("--spec", help=argparse.SUPPRESS)
    args = p.parse_args()

    if args.worker:
        run_worker(args)
        return 0

    args.runs = args.runs or (5 if args.quick else 50)
    args.warmup = args.warmup if args.warmup is not None else (1 if args.quick else 5)
    args.rounds = args.rounds or (2 if args.quick else 10)
    args.min_time = args.min_time if args.min_time is not None else (0.0 if args.quick else 2.0)
    args.threads = [int(t) for t in args.threads.split(",") if t.strip()]
    names = benchlib.pick_models(args.models, MODELS, p.error)
    args.variants = ["default"]
    skipped_columns = {}
    args.tuning_dbs = parse_tuning_dbs(args.tuning_db, args.threads, p.error)
    if args.tuning_dbs:
        if importlib.util.find_spec("tvmgen.tuning.tune") is None:
            skipped_columns["tuned"] = "tvmgen.tuning.tune is not importable in this tvmgen, so no tuned builds"
            progress(f"note: {skipped_columns['tuned']}; the tuned column is left out")
            args.tuning_dbs = {}
        else:
            args.variants.append("tuned")
    if args.with_unscheduled:
        args.variants.append("unscheduled")

    results, failures = [], []
    with benchlib.work_dir(args.keep, "tvmgen-bench-") as work:
        load_start = benchlib.load_at_start()
        start = time.perf_counter()
        for name in names:
            try:
                results.append(bench_model(name, work, args))
            except benchlib.StepError as e:
                failures.append({"model": name, "error": str(e), "summary": e.summary})
                progress(f"{name}: FAILED\n{e}")
    total = time.perf_counter() - start
    load_end = os.getloadavg()
    rows = [r for m in results for r in m["rows"]]
    progress(f"done in {total:.0f}s")

    if rows:
        window = f" and ~{args.min_time:g} s" if args.min_time else ""
        print(
            f"tvmgen CPU speed (host/cpu; per model and thread count one process times every runtime in "
            f"{args.rounds} round-robin rounds; median of >= {args.runs} runs{window} each after "
            f"{args.warmup} warm-up; x/ref = latency / reference latency)"
        )
        print(format_table(rows, args.variants))
        print(
            "outputs: "
            + (
                "every tvmgen build matches the reference"
                if all(r["outputs_match"] for r in rows)
                else "DIFFERS from the reference: "
                + ", ".join(f"{r['label']}/{r['threads']}" for r in rows if not r["outputs_match"])
            )
            + f" (max abs diff in brackets; tolerance {ATOL:g} + {RTOL:g} x largest reference value)"
        )
        for r in rows:
            if "gflops" in r:
                print(
                    f"{r['label']}, {r['threads']} thread(s): "
                    + ", ".join(f"{k} {g:.1f} GFLOP/s" for k, g in r["gflops"].items())
                )
        print(
            f"load average (1 min): {load_start[0]:.2f} at the start, {load_end[0]:.2f} at the end "
            f"on {os.cpu_count()} CPUs"
        )
        print()
        print(format_compile_table(results))
    for m in results:
        for variant, why in m["skipped"].items():
            print(f"{m['label']}: no {variant} build: {why}")
    for variant, why in skipped_columns.items():
        print(f"{variant}: skipped ({why})")
    for f in failures:
        print(f"{f['model']}: FAILED: {f['summary']}")

    if args.json:
        benchlib.write_json(
            args.json,
            "cpu_speed",
            {
                "settings": {
                    "runs": args.runs,
                    "rounds": args.rounds,
                    "warmup": args.warmup,
                    "min_time_s": args.min_time,
                    "threads": args.threads,
                    "builds": args.variants,
                    "gemm_size": args.gemm_size,
                    "tuning_db": {("all" if k is None else str(k)): str(v) for k, v in args.tuning_dbs.items()} or None,
                    "quick": args.quick,
                    "seed": SEED,
                    "atol": ATOL,
                    "rtol": RTOL,
                },
                "environment": {**environment(), "loadavg_start": load_start, "loadavg_end": load_end},
                "total_s": total,
                "rows": rows,
                "models": [{k: v for k, v in m.items() if k != "rows"} for m in results],
                "skipped_columns": skipped_columns,
                "failures": failures,
            },
        )
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main())
