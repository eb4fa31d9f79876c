#!/usr/bin/env python3
"""tvmgen against onnxruntime / LiteRT on the model zoo: 1 and 2 threads, quiet and contended, or paced.

For each zoo model (benchmarks/zoo.py builds them; nothing is downloaded) and each thread count, one
child process loads tvmgen's host artifact (untuned `tvmgen compile`, `HostModel.run`) and the
reference runtime with that many threads, and times both round-robin (medians):
  quiet      back to back, nothing else running;
  contended  while one busy-loop process per CPU keeps every core busy, as other apps, the UI and the
             camera do on a phone: a parallel kernel that waits for a descheduled thread shows here.
  paced      (--paced) a sleep of 1/fps before each run, as a camera app calls a model once per frame:
             the cores idle in between, the caches cool and the thread pools' workers go to sleep.
             tvmgen-run (the C++ runtime apps use through JNI) is timed too, back to back and with
             --pace-ms 1000/fps, in the same child, so every ratio comes from one run; and where a JDK
             is there, the Java API itself (org.tvmgen.Model: run, its inputs and outputs direct buffers
             bound once, as an app calls it; benchmarks/java/PacedRun.java) both ways in one JVM.
The table: per model and thread count both engines' medians, tvmgen / reference, and each engine's
contended / quiet (or paced / back-to-back) slowdown; then geometric means.

    .venv/bin/python benchmarks/speed.py                              # every zoo model (~15 min on 2 cores)
    .venv/bin/python benchmarks/speed.py --models mobilenet_v2,audio_rnn --threads 2
    .venv/bin/python benchmarks/speed.py --paced [--fps 30]           # back to back against paced
    .venv/bin/python benchmarks/speed.py --paced --no-java            # without the Java API's columns
    .venv/bin/python benchmarks/speed.py --work DIR                   # keep (and reuse) models and artifacts
    TVMGEN_THREAD_POOL=tvm .venv/bin/python benchmarks/speed.py       # TVM's own thread pool instead
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
import benchlib
import zoo
import zoo_state_pairs

PHASES = ("quiet", "contended")
PACED_PHASES = ("quiet", "paced")
# Rounds (blocks per engine, alternating) and seconds per engine in each phase. With busy loops on
# every core, an engine's thread spends stretches alone on a core and stretches sharing one; in 3
# long blocks one such stretch could decide a median (ShuffleNet at one thread once measured 2.2x
# its quiet time against onnxruntime's 1.0x in the same run). 12 shorter blocks over twice the time
# give both engines the same mix.
ROUNDS = {"quiet": 3, "contended": 12, "paced": 5}
MIN_TIME_S = {"quiet": 0.5, "contended": 1.0}
# tvmgen-run's runs in the paced mode: back to back (enough to fill about 0.5 s on small models), paced
CPP_RUNS = {"quiet": 200, "paced": 40}
JAVA_WARMUP = 50  # untimed calls before the Java API's back-to-back runs (the JIT compiles the call path)
JAVA_SOURCE = Path(__file__).resolve().parent / "java" / "PacedRun.java"
# the columns of the C++ and Java paths: row key -> short name in the table and the summary
NATIVE = {"tvmgen_run": "run", "jni": "jni"}
NATIVE_NAMES = {"tvmgen_run": "tvmgen-run", "jni": "JNI Model.run"}


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


def time_model(
    name: str,
    work: Path,
    threads: int,
    runs: int,
    fps: float = 0,
    runner: Path | None = None,
    java: tuple[Path, str] | None = None,
) -> dict:
    """In a child with TVM_NUM_THREADS=threads: both engines, quiet then contended; with ``fps``, quiet then
    paced at ``fps`` runs a second, tvmgen-run (``runner``: a runtime install prefix) both ways, and the
    Java API (``java``: the JNI library's directory and a class path with tvmgen.jar and PacedRun) both ways."""
    from tvmgen.runtime.runner import HostModel

    model_file, artifact = prepare(name, work)
    model = HostModel(artifact, threads=threads)
    # a streaming model's own inputs (its state held by the runtime): each run is one step, on both sides
    inputs = zoo.model_inputs(model.inputs, 0, zoo.INPUT_VALUES.get(name, ({},))[0])
    ref = zoo.reference_runner(model_file, zoo._consts(zoo.build_flags(name), model_file), threads)
    if model.manifest.state:  # (a stateless model's reference is timed as it is, with nothing around it)
        ref = zoo_state_pairs.reference_stepper(model_file, model.manifest, model.directory, ref)
    ours = model.run(inputs)
    row = {
        "model": name,
        "threads": threads,
        "thread_pool": model.parallel,
        "tvmgen_threads": model.threads,
        "reference": "litert" if model_file.suffix == ".tflite" else "onnxruntime",
        "outputs": check_outputs(name, ours, ref(inputs)),
    }
    for phase in PACED_PHASES if fps else PHASES:
        timed = [benchlib.Timed("tvmgen", lambda: model.run(inputs)), benchlib.Timed("reference", lambda: ref(inputs))]
        busy = hogs() if phase == "contended" else []
        try:
            if phase == "paced":
                benchlib.paced(timed, 1 / fps, runs=runs, rounds=ROUNDS[phase])
            else:
                benchlib.round_robin(timed, warmup=3, runs=runs, rounds=ROUNDS[phase], min_time=MIN_TIME_S[phase])
        finally:
            for p in busy:
                p.kill()
                p.wait()
        row[phase] = {t.key: benchlib.median(t.times_ms) for t in timed}
    if fps and runner is not None:
        row["tvmgen_run"] = time_tvmgen_run(runner / "bin" / "tvmgen-run", artifact, work, threads, fps, runs)
    if fps and java is not None:
        row["jni"] = time_java(java, artifact, work, threads, fps, runs, model.inputs, inputs, ours, name)
    return row


def java_paths(prefix: Path | None) -> tuple[Path, Path] | None:
    """(the directory of libtvmgen_jni.so, tvmgen.jar) in a runtime install prefix (lib/, share/java/) or a
    CMake build directory (both at its top), or None."""
    if prefix is None:
        return None
    for lib, jar in ((prefix / "lib", prefix / "share" / "java" / "tvmgen.jar"), (prefix, prefix / "tvmgen.jar")):
        if (lib / "libtvmgen_jni.so").is_file() and jar.is_file():
            return lib, jar
    return None


def compile_java(jar: Path, work: Path) -> str:
    """PacedRun compiled against ``jar`` into WORK/java-classes: the class path for ``java``."""
    classes = work / "java-classes"
    classes.mkdir(exist_ok=True)
    javac = shutil.which("javac")
    if javac is None:
        raise RuntimeError("javac not found (install a JDK)")
    proc = subprocess.run(
        [javac, "-cp", str(jar), "-d", str(classes), str(JAVA_SOURCE)], capture_output=True, text=True
    )
    if proc.returncode != 0:
        raise RuntimeError(f"javac failed: {(proc.stderr.strip().splitlines() or ['?'])[-1]}")
    return f"{jar}{os.pathsep}{classes}"


def time_java(
    java: tuple[Path, str], artifact: Path, work: Path, threads: int, fps: float, runs: int, specs, inputs, ours, name
) -> dict:
    """The Java API's median whole call (run, inputs and outputs bound direct buffers) back to back and paced,
    in one JVM (PacedRun), with its outputs checked against HostModel.run's; or the error."""
    import numpy as np

    lib, classpath = java
    tag = work / f"{artifact.name}-{threads}t-java"
    files = []
    for k, spec in enumerate(specs):
        f = Path(f"{tag}-in{k}.bin")
        np.ascontiguousarray(inputs[spec.name]).astype(np.dtype(spec.dtype).newbyteorder("<")).tofile(f)
        files.append(str(f))
    argv = ["java", f"-Dtvmgen.library.path={lib}", "-cp", classpath, "PacedRun", str(artifact), str(threads)]
    argv += [str(JAVA_WARMUP), str(max(runs, CPP_RUNS["quiet"])), str(max(runs, CPP_RUNS["paced"]))]
    argv += [f"{1e3 / fps:g}", str(tag), *files]
    proc = subprocess.run(argv, capture_output=True, text=True, env=benchlib.thread_env(threads), timeout=1200)
    if proc.returncode != 0:  # the exception's line (a stack trace follows it), else the last line
        lines = (proc.stderr or proc.stdout).strip().splitlines() or ["?"]
        return {"error": next((x for x in lines if "Exception" in x or "Error" in x), lines[-1])[:200]}
    out = json.loads(proc.stdout.strip().splitlines()[-1])
    got = [
        np.fromfile(f"{tag}-out{k}.bin", dtype=np.dtype(a.dtype).newbyteorder("<")).reshape(a.shape)
        for k, a in enumerate(ours)
    ]
    out["outputs"] = check_outputs(name, got, ours)
    return out


def time_tvmgen_run(runner: Path, artifact: Path, work: Path, threads: int, fps: float, runs: int) -> dict:
    """tvmgen-run's median whole call (Run, inputs and outputs bound) back to back and paced (--pace-ms), or
    the error."""
    out = {}
    for phase, pace_ms in (("quiet", 0.0), ("paced", 1e3 / fps)):
        repeat = max(runs, CPP_RUNS[phase])
        extra = ("--threads", str(threads), "--pace-ms", f"{pace_ms:g}")
        tag = f"{artifact.name}-{threads}t-{phase}"
        try:
            timings, _, _ = benchlib.tvmgen_run(
                runner, artifact, work, benchlib.thread_env(threads), 10, repeat, tag, extra
            )
        except SystemExit as e:  # tvmgen-run failed: its stderr
            return {"error": str(e).strip().splitlines()[-1][:200]}
        out[phase] = timings["total_ms"]["median"]
        out["threads"] = timings["threads"]
    return out


def check_outputs(name: str, actual, expected) -> str:
    """The zoo's criterion (zoo.py): "ok" or "MISMATCH (error)"; int8 models in output quanta."""
    if "int8" in name:
        mean, q, same = zoo.int8_difference(actual, expected)
        return "ok" if mean <= 2 * q and same else f"MISMATCH ({mean / q:.1f} quanta)"
    err = zoo.max_error(actual, expected)
    return "ok" if err <= zoo.tolerance(expected) else f"MISMATCH ({err:.1e})"


def summarise(rows: list[dict], phases=PHASES) -> dict:
    slow = phases[1]
    out = {}
    for threads in sorted({r["threads"] for r in rows}):
        sel = [r for r in rows if r["threads"] == threads and "quiet" in r]
        s = {}
        for phase in phases:
            s[f"{phase}_ratio"] = zoo.geomean([r[phase]["tvmgen"] / r[phase]["reference"] for r in sel])
            s[f"{phase}_worst"] = max(
                ((r[phase]["tvmgen"] / r[phase]["reference"], r["model"]) for r in sel), default=None
            )
        for engine in ("tvmgen", "reference"):
            s[f"{engine}_slowdown"] = zoo.geomean([r[slow][engine] / r["quiet"][engine] for r in sel])
        for key in NATIVE:  # tvmgen-run and the Java API against the same reference
            cpp = [r for r in sel if "paced" in r.get(key, {})]
            if not cpp:
                continue
            for phase in phases:
                ratios = [(r[key][phase] / r[phase]["reference"], r["model"]) for r in cpp]
                s[f"{key}_{phase}_ratio"] = zoo.geomean([x for x, _ in ratios])
                s[f"{key}_{phase}_worst"] = max(ratios)
            s[f"{key}_slowdown"] = zoo.geomean([r[key]["paced"] / r[key]["quiet"] for r in cpp])
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


def format_paced_table(rows: list[dict]) -> str:
    """Back to back and paced side by side: tvmgen's Python runner (py), tvmgen-run (run), the Java API (jni)
    and the reference. ``outputs``: tvmgen's against the reference's, then the Java API's against
    HostModel.run's where they differ."""
    header = ["model", "threads", "reference", "outputs"]
    for phase in ("b2b", "paced"):
        header += [f"py ms ({phase})", f"run ms ({phase})", f"jni ms ({phase})", f"ref ms ({phase})"]
        header += [f"py/ref ({phase})", f"run/ref ({phase})", f"jni/ref ({phase})"]
    header += ["paced/b2b py", "paced/b2b run", "paced/b2b jni", "paced/b2b ref"]
    body = []
    for r in rows:
        if "quiet" not in r:
            body.append([r["model"], str(r["threads"]), "-", "failed: " + r.get("error", "?")[:60]])
            continue
        native = {key: r.get(key, {}) for key in NATIVE}
        outputs = r["outputs"]
        if native["jni"].get("outputs", "ok") != "ok":
            outputs += f", jni {native['jni']['outputs']}"
        cells = [r["model"], str(r["threads"]), r["reference"], outputs]
        for phase in PACED_PHASES:
            py, ref = r[phase]["tvmgen"], r[phase]["reference"]
            times = [py, *(n.get(phase) for n in native.values())]
            cells += [_ms(t) for t in times] + [_ms(ref)]
            cells += [benchlib.fmt_ratio(benchlib.ratio(t, ref)) for t in times]
        cells += [benchlib.fmt_ratio(r["paced"]["tvmgen"] / r["quiet"]["tvmgen"])]
        cells += [benchlib.fmt_ratio(benchlib.ratio(n.get("paced"), n.get("quiet"))) for n in native.values()]
        cells += [benchlib.fmt_ratio(r["paced"]["reference"] / r["quiet"]["reference"])]
        for key, n in native.items():
            if "error" in n:
                cells.append(f"{NATIVE_NAMES[key]} failed: {n['error'][:60]}")
        body.append(cells)
    return benchlib.table(header, body, right=set(range(4, len(header))))


def _ms(x) -> str:
    """Milliseconds with three decimals under 1 ms (a small model's back-to-back call takes microseconds)."""
    return benchlib.fmt_num(x, digits=3 if x is not None and x < 1 else 2)


def summary_lines(summary: dict, fps: float = 0) -> list[str]:
    """One line per thread count: the geometric means, the slowest model, the slowdowns."""
    lines = []
    for threads, s in summary.items():
        worst = s["quiet_worst"]
        if not worst:
            lines.append(f"{threads} thread(s): -")
        elif not fps:
            lines.append(
                f"{threads} thread(s): tvmgen / reference geometric mean {benchlib.fmt_ratio(s['quiet_ratio'])} quiet, "
                f"{benchlib.fmt_ratio(s['contended_ratio'])} busy; slowest {worst[1]} {benchlib.fmt_ratio(worst[0])}; "
                f"busy / quiet: tvmgen {benchlib.fmt_ratio(s['tvmgen_slowdown'])}, "
                f"reference {benchlib.fmt_ratio(s['reference_slowdown'])}"
            )
        else:
            paced_worst = s["paced_worst"]
            line = (
                f"{threads} thread(s): HostModel.run / reference geometric mean {benchlib.fmt_ratio(s['quiet_ratio'])} "
                f"back to back (slowest {worst[1]} {benchlib.fmt_ratio(worst[0])}), "
                f"{benchlib.fmt_ratio(s['paced_ratio'])} paced at {fps:g} fps (slowest {paced_worst[1]} "
                f"{benchlib.fmt_ratio(paced_worst[0])})"
            )
            for key, label in NATIVE_NAMES.items():
                if f"{key}_paced_ratio" in s:
                    w, wq = s[f"{key}_paced_worst"], s[f"{key}_quiet_worst"]
                    line += (
                        f"; {label} / reference {benchlib.fmt_ratio(s[f'{key}_quiet_ratio'])} back to back "
                        f"(slowest {wq[1]} {benchlib.fmt_ratio(wq[0])}), "
                        f"{benchlib.fmt_ratio(s[f'{key}_paced_ratio'])} paced (slowest {w[1]} {benchlib.fmt_ratio(w[0])})"
                    )
            line += (
                f"; paced / back to back: HostModel.run {benchlib.fmt_ratio(s['tvmgen_slowdown'])}, "
                + "".join(
                    f"{label} {benchlib.fmt_ratio(s[f'{key}_slowdown'])}, "
                    for key, label in NATIVE_NAMES.items()
                    if f"{key}_slowdown" in s
                )
                + f"reference {benchlib.fmt_ratio(s['reference_slowdown'])}"
            )
            lines.append(line)
    return lines


def parse_args(argv=None):
    p = benchlib.parser(__doc__)
    benchlib.models_option(p, zoo.MODELS)
    p.add_argument("--threads", default="1,2", help="comma-separated thread counts [default: 1,2]")
    p.add_argument(
        "--runs", type=int, default=20, help="timed runs per engine, phase and round, at least [default: 20]"
    )
    p.add_argument("--work", type=Path, help="directory for the models and artifacts, kept and reused")
    p.add_argument(
        "--paced",
        action="store_true",
        help="back to back against paced (a sleep of 1/FPS before each run), HostModel.run and tvmgen-run, "
        "instead of quiet against busy",
    )
    p.add_argument("--fps", type=float, default=30.0, help="frames per second of --paced [default: 30]")
    p.add_argument(
        "--runtime",
        type=Path,
        metavar="PREFIX",
        help="--paced: a host runtime's install prefix (bin/tvmgen-run; lib/libtvmgen_jni.so and "
        "share/java/tvmgen.jar for the Java API's columns) [default: built from jni/ with CMake, cached; with the "
        "Java API where java and javac are found]",
    )
    p.add_argument(
        "--jni",
        type=Path,
        metavar="DIR",
        help="--paced: where libtvmgen_jni.so and tvmgen.jar are (an install prefix, or a CMake build directory "
        "with both at its top) [default: the runtime's]",
    )
    p.add_argument("--no-java", action="store_true", help="--paced: leave the Java API out")
    p.add_argument("--java-classpath", help=zoo.argparse_hidden())  # the child's: tvmgen.jar and PacedRun
    p.add_argument("--one", help=zoo.argparse_hidden())
    benchlib.json_option(p)
    args = p.parse_args(argv)
    try:
        args.thread_counts = [int(t) for t in args.threads.split(",") if t]
    except ValueError:
        p.error(f"--threads takes comma-separated numbers, not {args.threads!r}")
    if not args.thread_counts or min(args.thread_counts) < 1:
        p.error("--threads needs thread counts of at least 1")
    if not 0 < args.fps <= 1000:
        p.error(f"--fps must be above 0 and at most 1000, not {args.fps:g}")
    if args.runtime and not (args.runtime / "bin" / "tvmgen-run").is_file():
        p.error(f"{args.runtime} has no bin/tvmgen-run")
    if args.jni and java_paths(args.jni) is None:
        p.error(f"{args.jni} has no libtvmgen_jni.so and tvmgen.jar (lib/ and share/java/, or both at its top)")
    args.models = benchlib.pick_models(args.models, zoo.MODELS, p.error)
    return args


def main() -> None:
    args = parse_args()
    fps = args.fps if args.paced else 0
    if args.one:
        name, threads = args.one.split(":")
        found = java_paths(args.jni) if args.java_classpath else None
        java = (found[0], args.java_classpath) if found else None
        print(json.dumps(time_model(name, args.work, int(threads), args.runs, fps, args.runtime, java)))
        return
    want_java = args.paced and not args.no_java
    if want_java and not all(shutil.which(t) for t in ("java", "javac")):
        benchlib.log("java or javac not found: the Java API's columns are left out (install a JDK)")
        want_java = False
    if args.paced and args.runtime is None:
        from tvmgen.runtime import runtime_build

        benchlib.progress(
            "the host runtime (tvmgen-run" + (", the Java API" if want_java else "") + "): built from jni/ with "
            "CMake once, cached"
        )
        args.runtime = runtime_build.cached_build("host")
    if want_java and args.jni is None:
        args.jni = args.runtime if java_paths(args.runtime) else None
        if args.jni is None:
            benchlib.log(f"{args.runtime} has no Java API (no JDK when it was built?): its columns are left out")
    with benchlib.work_dir(args.work, "tvmgen-speed-") as work:
        if want_java and args.jni is not None:
            try:
                args.java_classpath = compile_java(java_paths(args.jni)[1], work)
            except RuntimeError as e:
                benchlib.log(f"the Java API's columns are left out: {e}")
                args.java_classpath = None
        run(args.models, args.thread_counts, work, args)


def run(models: list[str], thread_counts: list[int], work: Path, args) -> None:
    load = benchlib.load_at_start()
    fps = args.fps if args.paced else 0
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
            what = f"back to back and paced at {fps:g} fps" if fps else "quiet and contended"
            benchlib.progress(f"[{i}/{len(models)}] {name}: timing at {threads} thread(s), {what}")
            argv = [
                sys.executable,
                __file__,
                "--one",
                f"{name}:{threads}",
                "--work",
                str(work),
                "--runs",
                str(args.runs),
            ]
            if fps:
                argv += ["--paced", "--fps", str(fps), "--runtime", str(args.runtime)]
                if getattr(args, "java_classpath", None):
                    argv += ["--jni", str(args.jni), "--java-classpath", args.java_classpath]
            proc = subprocess.run(argv, capture_output=True, text=True, env=benchlib.thread_env(threads))
            try:
                rows.append(json.loads(proc.stdout.strip().splitlines()[-1]))
            except (IndexError, json.JSONDecodeError):
                err = (proc.stderr.strip().splitlines() or ["?"])[-1][:200]
                rows.append({"model": name, "threads": threads, "error": err})
                benchlib.log(f"  {name} at {threads} thread(s) failed: {err}")
    pool = {r.get("thread_pool") for r in rows if "thread_pool" in r}
    if fps:
        print(
            f"tvmgen ({'/'.join(sorted(pool)) or '?'} thread pool, untuned) against onnxruntime / LiteRT, medians; "
            f"b2b: back to back; paced: a {1e3 / fps:.1f} ms sleep before each run ({fps:g} fps); "
            "py: HostModel.run, run: tvmgen-run (Run, inputs and outputs bound: Model::BindInput / BindOutput), "
            "jni: Java org.tvmgen.Model (run, direct buffers bound: bindInput / bindOutput)"
        )
        print(format_paced_table(rows))
    else:
        print(
            f"tvmgen ({'/'.join(sorted(pool)) or '?'} thread pool, untuned) against onnxruntime / LiteRT, "
            f"medians; busy: one busy-loop process per CPU ({os.cpu_count()}) running alongside"
        )
        print(format_table(rows))
    summary = summarise(rows, PACED_PHASES if fps else PHASES)
    print("\n".join(summary_lines(summary, fps)))
    print(f"load average (1 min) at the start: {load[0]:.2f} on {os.cpu_count()} CPUs")
    if args.json:
        benchlib.write_json(
            args.json,
            "speed",
            {
                "settings": {"mode": "paced" if fps else "contended", "fps": fps or None, "runs": args.runs},
                "rows": rows,
                "summary": {str(k): v for k, v in summary.items()},
                "loadavg_start": load,
            },
        )


if __name__ == "__main__":
    main()
