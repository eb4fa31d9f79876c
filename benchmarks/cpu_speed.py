#!/usr/bin/env python3
"""CPU speed: tvmgen's compiled models against onnxruntime, LiteRT and numpy/OpenBLAS on the host.

For six models, all made here (nothing is downloaded):

  builtin-mobilenet   tvmgen.frontends.builtin.mobilenet_onnx() (MobileNet v1 style, width 0.5), ONNX, 1x3x224x224
  mobilenetv2-torch   a MobileNetV2 (inverted residuals, width 1.0) written in torch, exported to ONNX
                      with torch.onnx.export (TorchScript exporter), 1x3x224x224
  keras-cnn-tflite    a small Keras CNN (Conv2D, DepthwiseConv2D, pooling, Dense) converted with
                      tf.lite.TFLiteConverter, 1x224x224x3
  gemm                an ONNX MatMul of two 1024x1024 float32 inputs (--gemm-size)
  ffn-int8            a transformer feed-forward block (16 tokens, 768 -> 3072 -> 768, ReLU), ONNX,
                      quantised to 8 bits by onnxruntime.quantization.quantize_dynamic (the
                      activations quantised at run time, MatMulInteger): the dot-product path
  head-matmul         a classifier head, 1x4x1024 @ a constant 1024x16384 + bias (--head-shape T,C,N):
                      67 MB of weights (beyond a 32 MB L3) streamed from memory every run, as a CTC recognizer's
                      over its character set. Its rows also give GB/s of weights against one
                      core's read bandwidth, measured in the same worker (NumPy reductions over
                      256 MB)

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
from cpu_speed_models import SEED
from cpu_speed_workers import ATOL, RTOL, run_worker

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "3")
os.environ.setdefault("TF_ENABLE_ONEDNN_OPTS", "0")

# name -> (how the model file is made, file suffix, reference runtime)
MODELS = {
    "builtin-mobilenet": ("builtin", ".onnx", "onnxruntime"),
    "mobilenetv2-torch": ("torch", ".onnx", "onnxruntime"),
    "keras-cnn-tflite": ("keras", ".tflite", "litert"),
    "gemm": ("gemm", ".onnx", "numpy"),
    "ffn-int8": ("int8", ".onnx", "onnxruntime"),
    "head-matmul": ("head", ".onnx", "onnxruntime"),
}

# tvmgen builds: name -> column label. "default" always; the others on request.
VARIANTS = {"default": "tvmgen", "tuned": "tuned", "unscheduled": "unscheduled"}


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
    if name == "head-matmul":
        return "head-" + "x".join(map(str, args.head_shape))
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
        "make",
        1,
        args.verbose,
        maker=maker,
        model_file=model_file,
        gemm_size=args.gemm_size,
        head_shape=args.head_shape,
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
    weight_bytes = entry["model_info"].get("weight_bytes")
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
            weight_bytes=weight_bytes,
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
        if weight_bytes and m.get("read_bandwidth"):
            row["read_bandwidth"] = m["read_bandwidth"]
            row["weights_gbs"] = {k: weight_bytes / (r["median_ms"] * 1e6) for k, r in rts.items()}
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


def bandwidth_lines(rows: list[dict]) -> list[str]:
    """For the rows that stream their weights: each runtime's GB/s of weights and its share of the read
    bandwidth measured in the same worker."""
    lines = []
    for r in rows:
        if "weights_gbs" not in r:
            continue
        bw = r["read_bandwidth"]
        shares = ", ".join(
            f"{VARIANTS.get(k, k)} {g:.1f} GB/s ({g / bw['gbs']:.0%})" for k, g in r["weights_gbs"].items()
        )
        lines.append(
            f"{r['label']}, {r['threads']} thread(s): weights streamed at {shares} of one core's read "
            f"bandwidth, {bw['gbs']:.1f} GB/s ({bw['how']})"
        )
    return lines


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
    p.add_argument(
        "--head-shape",
        type=lambda v: tuple(int(x) for x in v.split(",")),
        default=(4, 1024, 16384),
        metavar="T,C,N",
        help="head-matmul's rows, inner size and columns (default 4,1024,16384: 67 MB of weights, beyond the caches)",
    )
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
        for line in bandwidth_lines(rows):
            print(line)
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
                    "head_shape": list(args.head_shape),
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
