#!/usr/bin/env python3
"""Runtime overhead: per-call cost of the C++ runner, the Java API and the Python VM, and shipped library sizes.

Part 1, per-call overhead on the same host artifact (host/cpu, TVM_NUM_THREADS=1 everywhere):

  C++ tvmgen-run          the device runner (jni/tools/tvmgen_run.cc): its own per-stage timers
                          (SetInput / Run / GetOutput, steady_clock inside libtvmgen_runtime);
                          the total is the sum of the three stage medians
  C++ Model API           tvmgen::Model through jni/include/tvmgen/runtime.h, timed with
                          steady_clock around each call by a small harness compiled here with g++
  Java, direct buffers    org.tvmgen.Model through the JNI bridge with Tensor (direct ByteBuffer)
                          inputs and outputs, timed with System.nanoTime around each Java call by a
                          small harness compiled here with javac against tvmgen.jar
  Java, float[]           the same with float[] in and out (GetPrimitiveArrayCritical)
  Python VM               a raw tvm relax.VirtualMachine call: tvm.runtime.tensor() in, the VM's
                          main, .numpy() out, timed with time.perf_counter_ns around each stage
  Python HostModel.run    tvmgen.runtime.runner.HostModel.run(inputs) (adds input checks), timed as a whole
  references              onnxruntime's InferenceSession.run on the ONNX source and LiteRT's set_tensor,
                          invoke, get_tensor on the same model as TFLite (the small models), timed as a whole

for three models: add-relu-1x16 (ONNX Add + Relu on a 1x16 float32 tensor, made with onnx.helper: the call
overhead is nearly all there is), dense-head (Gemm 64 -> 256 -> 256 -> 4 with ReLU and Softmax: a model of a
few microseconds) and builtin-mobilenet (tvmgen.frontends.builtin.materialize("builtin:mobilenet"), for
context); the small ones also as TFLite, for LiteRT ("vs LiteRT": a path's total over LiteRT's). Each path runs in a fresh process
for each of --rounds rounds; a row shows the median over rounds of each round's per-call median.

Part 2, stripped size of what an app ships: the runtime built with tvmgen.runtime.runtime_build.build()
for host (x86_64) and linux-aarch64, each .so copied and stripped (strip / aarch64-linux-gnu-strip).

    .venv/bin/python benchmarks/runtime_overhead.py                 # full run (~2 min on 2 cores)
    .venv/bin/python benchmarks/runtime_overhead.py --quick         # smoke test (~50 s)
    .venv/bin/python benchmarks/runtime_overhead.py --json out.json

The table goes to stdout; progress goes to stderr.
"""

from __future__ import annotations

import argparse
import contextlib
import itertools
import os
import platform
import subprocess
import sys
import time
from pathlib import Path

import benchlib
from benchlib import StepError, last_json, progress
from runtime_overhead_harness import (
    STRIP,
    THREADS,
    bench_cpp,
    bench_cpp_api,
    bench_java,
    build_runtime,
    compile_cpp_harness,
    compile_java_harness,
    run_proc,
    stage_stats,
    strip_sizes,
)

SEED = 0

SMALL = ("add-relu-1x16", "dense-head")  # made here, as ONNX and as TFLite
MODELS = (*SMALL, "builtin-mobilenet")
SHORT = {"add-relu-1x16": "add-relu-1x16", "dense-head": "dense-head", "builtin-mobilenet": "mobilenet"}

# path key -> label in the table
PATHS = {
    "cpp": "C++ tvmgen-run",
    "cpp_api": "C++ Model API, per-call timer",
    "java_buffer": "Java Model, direct buffers",
    "java_floats": "Java Model, float[]",
    "python_vm": "Python VM (tensor/numpy)",
    "python_hostmodel": "Python HostModel.run",
    "python_onnxruntime": "Python onnxruntime run (ref.)",
    "python_litert": "Python LiteRT set/invoke/get (ref.)",
}

# What an app ships: (row label, files)
SIZE_ROWS = [
    ("libtvmgen_runtime.so", ["libtvmgen_runtime.so"]),
    ("libtvmgen_jni.so + _jni_bridge.so", ["libtvmgen_jni.so", "libtvmgen_jni_bridge.so"]),
    ("libtvm_runtime.so", ["libtvm_runtime.so"]),
    ("libtvm_ffi.so", ["libtvm_ffi.so"]),
]
ARCH_LABEL = {
    "host": "x86_64" if platform.machine() in ("x86_64", "AMD64") else platform.machine(),
    "linux-aarch64": "aarch64",
}


# =========================================================================== worker modes (child processes)


def make_small(name: str, path: Path) -> dict:
    """``name``'s ONNX model at ``path`` (onnx.helper, seeded weights) and the same as TFLite beside it, for LiteRT.

    add-relu-1x16: y = Relu(x + bias), x 1x16 (the call is all there is). dense-head: a keyword-spotting style
    head, x 1x64 -> Gemm 256, Relu -> Gemm 256, Relu -> Gemm 4 -> Softmax (about 82k multiply-adds: a model of
    a few microseconds, where a call's fixed cost is still a large part).
    """
    import numpy as np
    import onnx
    from onnx import TensorProto, helper, numpy_helper

    rng = np.random.default_rng(SEED)
    if name == "add-relu-1x16":
        width, layers = 16, []
        bias = rng.standard_normal(16).astype(np.float32)
        nodes = [helper.make_node("Add", ["x", "bias"], ["sum"]), helper.make_node("Relu", ["sum"], ["y"])]
        inits = [numpy_helper.from_array(bias, "bias")]
        made = "onnx.helper: y = Relu(x + bias), x 1x16 float32, bias seeded constant"
    else:
        width, sizes = 64, (64, 256, 256, 4)
        layers = [
            ((rng.standard_normal((a, b)) / np.sqrt(a)).astype(np.float32), rng.standard_normal(b).astype(np.float32))
            for a, b in itertools.pairwise(sizes)
        ]
        nodes, inits, prev = [], [], "x"
        for k, (w, b) in enumerate(layers):
            inits += [numpy_helper.from_array(w, f"w{k}"), numpy_helper.from_array(b, f"b{k}")]
            nodes.append(helper.make_node("Gemm", [prev, f"w{k}", f"b{k}"], [f"g{k}"]))
            prev = f"g{k}"
            if k < len(layers) - 1:
                nodes.append(helper.make_node("Relu", [prev], [f"r{k}"]))
                prev = f"r{k}"
        nodes.append(helper.make_node("Softmax", [prev], ["y"], axis=-1))
        made = "onnx.helper: Softmax(Gemm(Relu(Gemm(Relu(Gemm(x)))))), 64 -> 256 -> 256 -> 4, seeded weights"
    graph = helper.make_graph(
        nodes,
        name.replace("-", "_"),
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, width])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, [1, 4 if layers else width])],
        inits,
    )
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)], producer_name="tvmgen-bench")
    model.ir_version = 8
    onnx.checker.check_model(model)
    onnx.save(model, str(path))
    try:  # the same for LiteRT (its invoke is the reference's per-call cost)
        import tensorflow as tf

        @tf.function(input_signature=[tf.TensorSpec([1, width], tf.float32, name="x")])
        def same(x):
            if not layers:
                return tf.nn.relu(x + bias)
            for k, (w, b) in enumerate(layers):
                x = tf.matmul(x, w) + b
                x = tf.nn.relu(x) if k < len(layers) - 1 else tf.nn.softmax(x)
            return x

        tflite = tf.lite.TFLiteConverter.from_concrete_functions([same.get_concrete_function()]).convert()
        path.with_suffix(".tflite").write_bytes(tflite)
        made += "; the same as TFLite (tf.lite.TFLiteConverter) for LiteRT"
    except ImportError:
        pass
    return {"made_with": made}


def worker_compile(model: str, work: Path) -> dict:
    import numpy as np

    from tvmgen import frontends
    from tvmgen.compiler import build
    from tvmgen.compiler.targets.platforms import PLATFORMS
    from tvmgen.core.artifact import sha256_file
    from tvmgen.core.model import random_inputs
    from tvmgen.frontends import builtin

    if model in SMALL:
        src = work / f"{model.replace('-', '_')}.onnx"
        made = make_small(model, src)
    else:
        src = builtin.materialize("builtin:mobilenet", work)
        made = {
            "made_with": 'tvmgen.frontends.builtin.materialize("builtin:mobilenet") (MobileNet v1 style, width 0.5)'
        }
    out = work / f"{model}-host-cpu"
    t0 = time.perf_counter()
    imported = frontends.load(src, [])
    manifest = build.compile_to_artifact(
        imported,
        build.BuildOptions(PLATFORMS["host"], "cpu"),
        out,
        True,
        {"name": model, "source": str(src), "format": imported.format, "sha256": sha256_file(src)},
    )
    compile_s = time.perf_counter() - t0
    inputs = random_inputs(manifest.inputs, SEED)
    files = []
    for k, spec in enumerate(manifest.inputs):  # raw little-endian bytes (what tvmgen-run and the jar read)
        p = work / f"{model}-in{k}.bin"
        np.ascontiguousarray(inputs[spec.name]).astype(np.dtype(spec.dtype).newbyteorder("<")).tofile(p)
        files.append(str(p))
    np.savez(work / f"{model}-inputs.npz", **inputs)
    art_bytes = sum(p.stat().st_size for p in out.rglob("*") if p.is_file())
    return {
        **made,
        "artifact": str(out),
        "compile_s": compile_s,
        "artifact_bytes": art_bytes,
        "input_files": files,
        "inputs": [s.to_json() for s in manifest.inputs],
        "outputs": [s.to_json() for s in manifest.outputs],
    }


def worker_python(artifact: Path, inputs_npz: Path, warmup: int, calls: int, save: Path) -> dict:
    import numpy as np
    import tvm

    from tvmgen.runtime.runner import HostModel, tvm_pool_size

    loaded = np.load(inputs_npz)
    inputs = {k: loaded[k] for k in loaded.files}
    model = HostModel(artifact)
    arrays = model.check_inputs(inputs)
    dev, params = model.dev, model.params
    f = model.vm[model.manifest.vm["entry"]]  # looked up once, as an app would
    tensor = tvm.runtime.tensor
    clock = time.perf_counter_ns

    def to_numpy(out):
        return [out.numpy()] if hasattr(out, "numpy") else [o.numpy() for o in out]

    # raw Relax VM: tvm.runtime.tensor in, main, .numpy() out
    times = np.zeros((calls, 4), dtype=np.int64)
    result = None
    for r in range(warmup + calls):
        t0 = clock()
        args = [tensor(a, dev) for a in arrays]
        t1 = clock()
        out = f(*args, *params)
        t2 = clock()
        result = to_numpy(out)
        t3 = clock()
        if r >= warmup:
            times[r - warmup] = (t1 - t0, t2 - t1, t3 - t2, t3 - t0)
    vm_stats = stage_stats(times)
    pool = tvm_pool_size()  # without pinning this process to one CPU
    np.savez(save, *result)

    def whole_calls(call) -> dict:
        total = np.zeros((calls, 4), dtype=np.int64)
        for r in range(warmup + calls):
            t0 = clock()
            call()
            t1 = clock()
            if r >= warmup:
                total[r - warmup, 3] = t1 - t0
        st = stage_stats(total)
        return {"total": st["total"], "calls": st["calls"]}

    # tvmgen's Python API, as `tvmgen run` and cpu_speed.py use it
    res = {
        "runtime": f"TVM {tvm.__version__} Relax VM (Python {platform.python_version()})",
        "tvm_threads": pool,
        "python_vm": vm_stats,
        "python_hostmodel": whole_calls(lambda: model.run(inputs)),
    }
    # the reference runtimes on the model's source, one thread, as speed.py calls them
    source = Path(model.manifest.model["source"])
    if source.suffix == ".onnx":
        import onnxruntime as ort

        opts = ort.SessionOptions()
        opts.intra_op_num_threads = opts.inter_op_num_threads = THREADS
        sess = ort.InferenceSession(str(source), opts, providers=["CPUExecutionProvider"])
        res["python_onnxruntime"] = whole_calls(lambda: sess.run(None, inputs))
    if source.with_suffix(".tflite").is_file():
        from ai_edge_litert.interpreter import Interpreter

        interp = Interpreter(model_path=str(source.with_suffix(".tflite")), num_threads=THREADS)
        interp.allocate_tensors()
        ins, outs = interp.get_input_details(), interp.get_output_details()
        values = [inputs[spec.name] for spec in model.manifest.inputs]

        def litert():
            for d, v in zip(ins, values):
                interp.set_tensor(d["index"], v)
            interp.invoke()
            return [interp.get_tensor(d["index"]) for d in outs]

        res["python_litert"] = whole_calls(litert)
    return res


def _work(args) -> dict:
    import tvmgen

    tvmgen.load_tvm_without_torch()  # ONNX and TFLite only: TVM loads without PyTorch, as the CLI's does
    if args.worker == "compile":
        return worker_compile(args.model, Path(args.work))
    if args.worker == "python":
        return worker_python(Path(args.artifact), Path(args.inputs), args.warmup_n, args.calls_n, Path(args.save))
    raise SystemExit(f"unknown worker {args.worker}")


# =========================================================================== driver


def call_worker(mode: str, verbose: bool, **kw) -> dict:
    argv = [sys.executable, Path(__file__).resolve(), "--worker", mode]
    for k, v in kw.items():
        argv += [f"--{k.replace('_', '-')}", v]
    return last_json(run_proc(argv, verbose, f"worker {mode}"), f"worker {mode}")


def summarize(rounds: list[dict]) -> dict:
    """Per stage: the median over rounds of each round's median (and the rounds' values)."""
    row = {"calls_per_round": rounds[0].get("calls"), "rounds": len(rounds)}
    for k in ("copy_in", "run", "copy_out", "total"):
        vals = [r[k]["median_us"] for r in rounds if k in r]
        row[k] = benchlib.median(vals)
        row[f"{k}_rounds"] = vals
    return row


def format_table(rows: list[dict], sizes: dict) -> str:
    header = ["model", "path", "calls", "copy-in us", "run us", "copy-out us", "total us", "vs C++", "vs LiteRT"]
    body = []
    for r in rows:
        total = benchlib.fmt_num(r["total"]) + ("*" if r["path"] == "cpp" else "")
        ratio = benchlib.fmt_ratio(r.get("ratio"))
        body.append(
            [
                SHORT[r["model"]],
                PATHS[r["path"]],
                f"{r['calls_per_round'] * r['rounds']}",
                benchlib.fmt_num(r["copy_in"]),
                benchlib.fmt_num(r["run"]),
                benchlib.fmt_num(r["copy_out"]),
                total,
                ratio,
                benchlib.fmt_ratio(r.get("ratio_vs_litert")),
            ]
        )
    if sizes:
        plats = [p for p in ("host", "linux-aarch64") if p in sizes]
        cols = [f"{ARCH_LABEL[p]} B" + ("" if sizes[p]["stripped"] else " (unstripped)") for p in plats]
        size_rows = []
        totals = dict.fromkeys(plats, 0)
        for label, names in SIZE_ROWS:
            cells = []
            for p in plats:
                got = [sizes[p]["files"].get(n) for n in names]
                if any(g is None for g in got):
                    cells.append("missing")
                    continue
                b = sum(g["stripped"] for g in got)
                totals[p] += b
                cells.append(str(b))
            size_rows.append(["", label, "", "", "", "", *cells])
        size_rows.append(["", "total (what an app ships)", "", "", "", "", *(str(totals[p]) for p in plats)])
        body += [None, ["stripped size", "library", "", "", "", "", *cols], None, *size_rows]
    return benchlib.table(header, body, set(range(2, max(len(x) for x in [header, *body] if x))))


def environment() -> dict:
    java = None
    with contextlib.suppress(OSError, IndexError):
        java = subprocess.run(["java", "-version"], capture_output=True, text=True).stderr.splitlines()[0]
    return {
        **benchlib.environment(("apache-tvm", "apache-tvm-ffi", "numpy", "onnx", "onnxslim")),
        "java": java,
        "env": {"TVM_NUM_THREADS": str(THREADS), "OMP_NUM_THREADS": str(THREADS)},
    }


def output_check(work: Path, name: str, model: dict) -> dict:
    """Largest difference of the C++ and Java outputs from the Python VM's (same library: expect 0)."""
    import numpy as np

    ref_path = work / f"{name}-python-out.npz"
    if not ref_path.is_file():
        return {}
    ref = np.load(ref_path)
    ref = [ref[k] for k in ref.files]
    res = {}
    cpp_dir = work / f"{name}-cpp-out"
    for k, spec in enumerate(model["outputs"]):
        safe = "".join(c if c.isalnum() or c in "-_." else "_" for c in spec["name"])
        cands = {"cpp": cpp_dir / f"{safe}.npy", "java": work / f"{name}-java-out{k}.bin"}
        for who, p in cands.items():
            if not p.is_file():
                continue
            got = np.load(p) if p.suffix == ".npy" else np.fromfile(p, dtype=np.dtype(spec["dtype"]).newbyteorder("<"))
            d = float(np.abs(got.ravel().astype(np.float64) - ref[k].ravel().astype(np.float64)).max())
            res[who] = max(res.get(who, 0.0), d)
    return res


def main() -> int:
    p = benchlib.parser(__doc__)
    p.add_argument(
        "--quick", action="store_true", help="smoke test: 1 round, 2000 calls (tiny model) / 5 calls (MobileNet)"
    )
    benchlib.json_option(p)
    p.add_argument("--calls", type=int, help="timed calls per round, small models (default 20000, --quick 2000)")
    p.add_argument("--warmup", type=int, help="untimed calls first, small models (default 5000, --quick 500)")
    p.add_argument("--mobilenet-calls", type=int, help="timed calls per round for MobileNet (default 10, --quick 5)")
    p.add_argument("--mobilenet-warmup", type=int, help="untimed MobileNet calls first (default 3, --quick 1)")
    p.add_argument("--rounds", type=int, help="fresh processes per path and model (default 5, --quick 1)")
    benchlib.models_option(p, MODELS)
    p.add_argument("--no-sizes", action="store_true", help="skip the aarch64 build and the library sizes")
    p.add_argument("--keep", type=Path, metavar="DIR", help="build, compile and measure in DIR and keep it")
    p.add_argument("-v", "--verbose", action="store_true", help="show the children's own stderr and cmake's output")
    # hidden worker mode: one step in a fresh process with TVM_NUM_THREADS set
    p.add_argument("--worker", help=argparse.SUPPRESS)
    for hidden in ("--model", "--work", "--artifact", "--inputs", "--save", "--warmup-n", "--calls-n"):
        p.add_argument(hidden, help=argparse.SUPPRESS)
    args = p.parse_args()

    if args.worker:
        args.warmup_n, args.calls_n = int(args.warmup_n or 0), int(args.calls_n or 0)
        benchlib.serve_worker(lambda: _work(args))  # whatever TVM prints goes to stderr
        return 0

    q = args.quick
    tiny = (args.warmup if args.warmup is not None else (500 if q else 5000), args.calls or (2000 if q else 20000))
    mobile = (
        args.mobilenet_warmup if args.mobilenet_warmup is not None else (1 if q else 3),
        args.mobilenet_calls or (5 if q else 10),
    )
    counts = {"add-relu-1x16": tiny, "dense-head": tiny, "builtin-mobilenet": mobile}
    rounds = args.rounds or (1 if q else 5)
    names = benchlib.pick_models(args.models, MODELS, p.error)

    os.environ["TVM_NUM_THREADS"] = str(THREADS)  # also for anything this process starts
    failures, models, sizes, results = [], {}, {}, {}
    prefix = classes = cpp_exe = None
    with benchlib.work_dir(args.keep, "tvmgen-overhead-") as work:
        load_start = benchlib.load_at_start()
        start = time.perf_counter()
        progress("building the host runtime (tvmgen.runtime.runtime_build.build('host'), JNI on) ...")
        try:
            prefix = build_runtime("host", work, args.verbose)
            progress(f"host runtime: {prefix}")
        except StepError as e:
            failures.append({"step": "host runtime", "error": str(e)})
            progress(f"FAILED: {e}")
        if prefix:
            for what, fn in (("C++", compile_cpp_harness), ("Java", compile_java_harness)):
                try:
                    if what == "C++":
                        cpp_exe = fn(prefix, work, args.verbose)
                    else:
                        classes = fn(prefix, work, args.verbose)
                except StepError as e:
                    failures.append({"step": f"{what} harness", "error": str(e)})
                    progress(f"FAILED: {e}")

        for name in names:
            progress(f"{name}: making and compiling (host/cpu) ...")
            try:
                models[name] = call_worker("compile", args.verbose, model=name, work=work)
                progress(
                    f"{name}: compiled in {models[name]['compile_s']:.1f}s, "
                    f"artifact {models[name]['artifact_bytes'] / 1e6:.2f} MB"
                )
            except StepError as e:
                failures.append({"step": f"compile {name}", "error": str(e)})
                progress(f"{name}: FAILED\n{e}")

        per_round: dict = {}  # (model, path) -> [round stats]
        for rnd in range(rounds):
            for name, model in models.items():
                warmup, calls = counts[name]
                tag = f"{name} round {rnd + 1}/{rounds}"
                steps = []
                if prefix:
                    steps.append(
                        ("cpp", lambda: {"cpp": bench_cpp(prefix, model, name, warmup, calls, work, rnd, args.verbose)})
                    )
                if cpp_exe:
                    steps.append(
                        (
                            "cpp_api",
                            lambda: {"cpp_api": bench_cpp_api(cpp_exe, model, name, warmup, calls, work, args.verbose)},
                        )
                    )
                if classes:
                    steps.append(
                        ("java", lambda: bench_java(prefix, classes, model, name, warmup, calls, work, args.verbose))
                    )
                steps.append(
                    (
                        "python",
                        lambda: call_worker(
                            "python",
                            args.verbose,
                            artifact=model["artifact"],
                            inputs=work / f"{name}-inputs.npz",
                            warmup_n=warmup,
                            calls_n=calls,
                            save=work / f"{name}-python-out.npz",
                        ),
                    )
                )
                for who, fn in steps:
                    progress(f"{tag}: {who}, {warmup} warm-up + {calls} timed calls ...")
                    try:
                        res = fn()
                    except StepError as e:
                        failures.append({"step": f"{who} {name} round {rnd + 1}", "error": str(e)})
                        progress(f"{tag}: {who} FAILED\n{e}")
                        continue
                    for key in PATHS:
                        if key in res:
                            per_round.setdefault((name, key), []).append(res[key])
                    extra = {k: v for k, v in res.items() if k not in PATHS}
                    if extra:
                        results.setdefault(name, {}).setdefault(who, extra)
                    got = ", ".join(f"{PATHS[k]} {res[k]['total']['median_us']:.2f} us" for k in PATHS if k in res)
                    progress(f"{tag}: {got}")

        if not args.no_sizes:
            for plat in ("host", "linux-aarch64"):
                try:
                    pre = prefix if plat == "host" and prefix else None
                    if pre is None:
                        progress(f"building the runtime for {plat} ...")
                        pre = build_runtime(plat, work, args.verbose)
                    sizes[plat] = strip_sizes(plat, pre, work, args.verbose)
                    if not sizes[plat]["stripped"]:
                        progress(f"note: {STRIP[plat]} not found: {plat} sizes are unstripped")
                except StepError as e:
                    failures.append({"step": f"sizes {plat}", "error": str(e)})
                    progress(f"sizes {plat}: FAILED\n{e}")

        rows = []
        for name in models:
            base = {}
            mine = []
            for key in PATHS:
                if (name, key) not in per_round:
                    continue
                row = {"model": name, "path": key, "label": PATHS[key], **summarize(per_round[(name, key)])}
                base[key] = row["total"]
                mine.append(row)
            for row in mine:  # ratio: vs tvmgen-run (the table); ratio_vs_cpp_api: vs the C++ harness
                row["ratio"] = benchlib.ratio(row["total"], base.get("cpp"))
                row["ratio_vs_cpp_api"] = benchlib.ratio(row["total"], base.get("cpp_api"))
                row["ratio_vs_litert"] = benchlib.ratio(row["total"], base.get("python_litert"))
            rows += mine
            models[name]["max_abs_diff_vs_python_vm"] = output_check(work, name, models[name])
            models[name]["per_round"] = {k: per_round[(name, k)] for k in PATHS if (name, k) in per_round}
    total = time.perf_counter() - start
    progress(f"done in {total:.0f}s")

    print(
        f"tvmgen runtime overhead (host {ARCH_LABEL['host']}/cpu, TVM_NUM_THREADS={THREADS}; per call: "
        f"median over {rounds} round(s) of each round's median, in microseconds; vs C++ = total / tvmgen-run total)"
    )
    print(format_table(rows, sizes))
    notes = [
        "* tvmgen-run total = sum of its per-stage medians (its own timers inside libtvmgen_runtime, printed "
        "to 0.1 us); the other totals are timed around the whole call"
    ]
    diffs = {n: m.get("max_abs_diff_vs_python_vm") for n, m in models.items()}
    bad = [f"{n}/{who}" for n, d in diffs.items() for who, v in (d or {}).items() if v > 1e-6]
    checked = any(diffs.values())
    if checked:
        notes.append(
            "outputs: C++ and Java "
            + (
                f"DIFFER from the Python VM for {', '.join(bad)}"
                if bad
                else "equal the Python VM's (max abs diff <= 1e-6)"
            )
        )
    for plat, s in sizes.items():
        if not s["stripped"]:
            notes.append(f"{STRIP[plat]} not found: {ARCH_LABEL[plat]} sizes are unstripped")
    print("\n".join(notes))
    for f in failures:
        print(f"{f['step']}: FAILED ({f['error'].splitlines()[0]})")
    sys.stdout.flush()

    if args.json:
        benchlib.write_json(
            args.json,
            "runtime_overhead",
            {
                "settings": {
                    "quick": q,
                    "rounds": rounds,
                    "threads": THREADS,
                    "warmup_calls": {n: counts[n][0] for n in names},
                    "timed_calls_per_round": {n: counts[n][1] for n in names},
                    "seed": SEED,
                },
                "environment": {**environment(), "loadavg_start": load_start, "loadavg_end": os.getloadavg()},
                "total_s": total,
                "rows": rows,
                "sizes": sizes,
                "models": models,
                "runtimes": results,
                "failures": failures,
            },
        )
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main())
