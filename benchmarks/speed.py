#!/usr/bin/env python3
"""tvmgen against onnxruntime / LiteRT on the model zoo: 1 and 2 threads, quiet and contended.

For each zoo model (benchmarks/zoo.py builds them; nothing is downloaded) and each thread count, one
child process loads tvmgen's host artifact (untuned `tvmgen compile`, `HostModel.run`) and the
reference runtime with that many threads, and times both round-robin (medians):
  quiet      nothing else running;
  contended  while one busy-loop process per CPU keeps every core busy, as other apps, the UI and the
             camera do on a phone: a parallel kernel that waits for a descheduled thread shows here.
The table: per model and thread count both engines' medians, tvmgen / reference, and each engine's
contended / quiet slowdown; then geometric means.

    .venv/bin/python benchmarks/speed.py                              # every zoo model (~15 min on 2 cores)
    .venv/bin/python benchmarks/speed.py --models mobilenet_v2,audio_rnn --threads 2
    .venv/bin/python benchmarks/speed.py --work DIR                   # keep (and reuse) models and artifacts
    TVMGEN_THREAD_POOL=tvm .venv/bin/python benchmarks/speed.py       # TVM's own thread pool instead
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
import benchlib
import zoo

PHASES = ("quiet", "contended")
# Rounds (blocks per engine, alternating) and seconds per engine in each phase. With busy loops on
# every core, an engine's thread spends stretches alone on a core and stretches sharing one; in 3
# long blocks one such stretch could decide a median (ShuffleNet at one thread once measured 2.2x
# its quiet time against onnxruntime's 1.0x in the same run). 12 shorter blocks over twice the time
# give both engines the same mix.
ROUNDS = {"quiet": 3, "contended": 12}
MIN_TIME_S = {"quiet": 0.5, "contended": 1.0}


def prepare(name: str, work: Path) -> tuple[Path, Path]:
    """The model file and its host artifact, made once (reused from --work when there)."""
    model = next((p for p in work.glob(f"{name}.*") if p.suffix in (".onnx", ".tflite")), None)
    if model is None:
        proc = subprocess.run(
            [sys.executable, str(Path(zoo.__file__)), "--build-only", name, "--keep", str(work)],
            capture_output=True,
            text=True,
        )
        if proc.returncode != 0:
            raise RuntimeError(f"building {name} failed: {(proc.stderr.strip().splitlines() or ['?'])[-1]}")
        model = next(p for p in work.glob(f"{name}.*") if p.suffix in (".onnx", ".tflite"))
    artifact = work / f"{name}-host"
    if not (artifact / "manifest.json").is_file():
        proc = subprocess.run(
            [
                sys.executable,
                "-m",
                "tvmgen",
                "compile",
                str(model),
                "-o",
                str(artifact),
                "--force",
                *zoo.build_flags(name),
            ],
            capture_output=True,
            text=True,
        )
        if proc.returncode != 0:
            raise RuntimeError(f"compiling {name} failed: {zoo._last_error(proc)}")
    return model, artifact


def hogs() -> list[subprocess.Popen]:
    """One busy loop per CPU, at this process's priority."""
    code = "while True: pass"
    procs = [subprocess.Popen([sys.executable, "-c", code]) for _ in range(os.cpu_count() or 1)]
    time.sleep(0.3)
    return procs


def time_model(name: str, work: Path, threads: int, runs: int) -> dict:
    """In a child with TVM_NUM_THREADS=threads: both engines, quiet then contended."""
    from tvmgen.core.model import random_inputs
    from tvmgen.runtime.runner import HostModel

    model_file, artifact = prepare(name, work)
    model = HostModel(artifact, threads=threads)
    inputs = random_inputs(model.manifest.inputs, seed=0)
    ref = zoo.reference_runner(model_file, zoo._consts(zoo.build_flags(name), model_file), threads)
    row = {
        "model": name,
        "threads": threads,
        "thread_pool": model.parallel,
        "tvmgen_threads": model.threads,
        "reference": "litert" if model_file.suffix == ".tflite" else "onnxruntime",
        "outputs": check_outputs(name, model.run(inputs), ref(inputs)),
    }
    for phase in PHASES:
        timed = [benchlib.Timed("tvmgen", lambda: model.run(inputs)), benchlib.Timed("reference", lambda: ref(inputs))]
        busy = hogs() if phase == "contended" else []
        try:
            benchlib.round_robin(timed, warmup=3, runs=runs, rounds=ROUNDS[phase], min_time=MIN_TIME_S[phase])
        finally:
            for p in busy:
                p.kill()
                p.wait()
        row[phase] = {t.key: benchlib.median(t.times_ms) for t in timed}
    return row


def check_outputs(name: str, actual, expected) -> str:
    """The zoo's criterion (zoo.py): "ok" or "MISMATCH (error)"; int8 models in output quanta."""
    if "int8" in name:
        mean, q, same = zoo.int8_difference(actual, expected)
        return "ok" if mean <= 2 * q and same else f"MISMATCH ({mean / q:.1f} quanta)"
    err = zoo.max_error(actual, expected)
    return "ok" if err <= zoo.tolerance(expected) else f"MISMATCH ({err:.1e})"


def summarise(rows: list[dict]) -> dict:
    out = {}
    for threads in sorted({r["threads"] for r in rows}):
        sel = [r for r in rows if r["threads"] == threads and "quiet" in r]
        s = {}
        for phase in PHASES:
            s[f"{phase}_ratio"] = zoo.geomean([r[phase]["tvmgen"] / r[phase]["reference"] for r in sel])
            s[f"{phase}_worst"] = max(
                ((r[phase]["tvmgen"] / r[phase]["reference"], r["model"]) for r in sel), default=None
            )
        for engine in ("tvmgen", "reference"):
            s[f"{engine}_slowdown"] = zoo.geomean([r["contended"][engine] / r["quiet"][engine] for r in sel])
        out[threads] = s
    return out


def format_table(rows: list[dict]) -> str:
    header = [
        "model",
        "threads",
        "reference",
        "outputs",
        "tvmgen ms",
        "ref ms",
        "ratio",
        "tvmgen ms (busy)",
        "ref ms (busy)",
        "ratio (busy)",
        "tvmgen slowdown",
        "ref slowdown",
    ]
    body = []
    for r in rows:
        if "quiet" not in r:
            body.append([r["model"], str(r["threads"]), "-", "failed: " + r.get("error", "?")[:60]] + ["-"] * 8)
            continue
        q, c = r["quiet"], r["contended"]
        body.append(
            [
                r["model"],
                str(r["threads"]),
                r["reference"],
                r["outputs"],
                benchlib.fmt_num(q["tvmgen"]),
                benchlib.fmt_num(q["reference"]),
                benchlib.fmt_ratio(q["tvmgen"] / q["reference"]),
                benchlib.fmt_num(c["tvmgen"]),
                benchlib.fmt_num(c["reference"]),
                benchlib.fmt_ratio(c["tvmgen"] / c["reference"]),
                benchlib.fmt_ratio(c["tvmgen"] / q["tvmgen"]),
                benchlib.fmt_ratio(c["reference"] / q["reference"]),
            ]
        )
    return benchlib.table(header, body, right=set(range(4, len(header))))


def main() -> None:
    p = benchlib.parser(__doc__)
    benchlib.models_option(p, zoo.MODELS)
    p.add_argument("--threads", default="1,2", help="comma-separated thread counts [default: 1,2]")
    p.add_argument(
        "--runs", type=int, default=20, help="timed runs per engine, phase and round, at least [default: 20]"
    )
    p.add_argument("--work", type=Path, help="directory for the models and artifacts, kept and reused")
    p.add_argument("--one", help=zoo.argparse_hidden())
    benchlib.json_option(p)
    args = p.parse_args()
    thread_counts = [int(t) for t in args.threads.split(",") if t]
    if args.one:
        name, threads = args.one.split(":")
        print(json.dumps(time_model(name, args.work, int(threads), args.runs)))
        return
    models = benchlib.pick_models(args.models, zoo.MODELS, p.error)
    with benchlib.work_dir(args.work, "tvmgen-speed-") as work:
        run(models, thread_counts, work, args)


def run(models: list[str], thread_counts: list[int], work: Path, args) -> None:
    load = benchlib.load_at_start()
    rows = []
    for i, name in enumerate(models, 1):
        try:
            benchlib.progress(f"[{i}/{len(models)}] {name}: model and host artifact")
            prepare(name, work)
        except RuntimeError as e:
            rows += [{"model": name, "threads": t, "error": str(e)} for t in thread_counts]
            benchlib.log(f"  {e}")
            continue
        for threads in thread_counts:
            benchlib.progress(f"[{i}/{len(models)}] {name}: timing at {threads} thread(s), quiet and contended")
            proc = subprocess.run(
                [sys.executable, __file__, "--one", f"{name}:{threads}", "--work", str(work), "--runs", str(args.runs)],
                capture_output=True,
                text=True,
                env=benchlib.thread_env(threads),
            )
            try:
                rows.append(json.loads(proc.stdout.strip().splitlines()[-1]))
            except (IndexError, json.JSONDecodeError):
                err = (proc.stderr.strip().splitlines() or ["?"])[-1][:200]
                rows.append({"model": name, "threads": threads, "error": err})
                benchlib.log(f"  {name} at {threads} thread(s) failed: {err}")
    pool = {r.get("thread_pool") for r in rows if "thread_pool" in r}
    print(
        f"tvmgen ({'/'.join(sorted(pool)) or '?'} thread pool, untuned) against onnxruntime / LiteRT, "
        f"medians; busy: one busy-loop process per CPU ({os.cpu_count()}) running alongside"
    )
    print(format_table(rows))
    summary = summarise(rows)
    for threads, s in summary.items():
        worst = s["quiet_worst"]
        print(
            f"{threads} thread(s): tvmgen / reference geometric mean {benchlib.fmt_ratio(s['quiet_ratio'])} quiet, "
            f"{benchlib.fmt_ratio(s['contended_ratio'])} busy; slowest {worst[1]} {benchlib.fmt_ratio(worst[0])}; "
            f"busy / quiet: tvmgen {benchlib.fmt_ratio(s['tvmgen_slowdown'])}, "
            f"reference {benchlib.fmt_ratio(s['reference_slowdown'])}"
            if worst
            else f"{threads} thread(s): -"
        )
    print(f"load average (1 min) at the start: {load[0]:.2f} on {os.cpu_count()} CPUs")
    if args.json:
        benchlib.write_json(
            args.json,
            "speed",
            {"rows": rows, "summary": {str(k): v for k, v in summary.items()}, "loadavg_start": load},
        )


if __name__ == "__main__":
    main()
