"""What the benchmarks share: progress lines, command-line helpers, worker child processes, a
round-robin timing harness, statistics, plain-text tables and JSON output."""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import platform
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent


# =========================================================================== progress and the machine


def progress(msg: str) -> None:
    """A timestamped progress line on stderr (stdout is kept for the tables)."""
    print(f"[bench {time.strftime('%H:%M:%S')}] {msg}", file=sys.stderr, flush=True)


def log(msg: str) -> None:
    """A plain progress line on stderr."""
    print(msg, file=sys.stderr, flush=True)


def load_at_start() -> tuple[float, float, float]:
    """The load average now; says on stderr when it is above 0.5, since other processes add noise."""
    load = os.getloadavg()
    if load[0] > 0.5:
        progress(f"note: load average is {load[0]:.2f} before starting; other processes will add noise")
    return load


def environment(packages: tuple[str, ...]) -> dict:
    """Python, CPU model and count, and the versions of ``packages``, for a benchmark's JSON."""
    from importlib.metadata import version

    def v(pkg):
        try:
            return version(pkg)
        except Exception:
            return None

    cpu = None
    try:
        for ln in Path("/proc/cpuinfo").read_text().splitlines():
            if ln.startswith("model name"):
                cpu = ln.split(":", 1)[1].strip()
                break
    except OSError:
        pass
    return {
        "python": platform.python_version(),
        "machine": platform.machine(),
        "cpu": cpu,
        "cpu_count": os.cpu_count(),
        "affinity": len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else None,
        "packages": {p: v(p) for p in packages},
    }


# =========================================================================== command line and files


def parser(doc: str) -> argparse.ArgumentParser:
    """An argument parser described by the first paragraph of ``doc``, the rest kept as written."""
    return argparse.ArgumentParser(
        description=doc.split("\n\n")[0], formatter_class=argparse.RawDescriptionHelpFormatter
    )


def json_option(p: argparse.ArgumentParser) -> None:
    """``--json OUT.json``: where to write every measurement too."""
    p.add_argument("--json", type=Path, metavar="OUT.json", help="also write every measurement as JSON here")


def models_option(p: argparse.ArgumentParser, models) -> None:
    """``--models``: a comma-separated subset of ``models`` (all by default); read it with ``pick_models``."""
    p.add_argument("--models", default=",".join(models), help=f"comma-separated subset of {', '.join(models)}")


def pick_models(value: str, choices, error) -> list[str]:
    """The names in a comma-separated option; ``error`` (e.g. ``parser.error``) on one not in ``choices``."""
    names = [m.strip() for m in value.split(",") if m.strip()]
    unknown = [m for m in names if m not in choices]
    if unknown:
        error(f"unknown model(s) {unknown}; choose from {list(choices)}")
    return names


@contextlib.contextmanager
def work_dir(keep: Path | None, prefix: str):
    """The directory to work in: ``keep`` (made if missing, and kept), else a temporary one removed on exit."""
    if keep:
        keep.mkdir(parents=True, exist_ok=True)
        yield keep.resolve()
        return
    work = Path(tempfile.mkdtemp(prefix=prefix))
    try:
        yield work
    finally:
        shutil.rmtree(work, ignore_errors=True)


def write_json(path: Path, benchmark: str, fields: dict) -> None:
    """Write ``{"benchmark", "created", **fields}`` to ``path`` (indented) and say so on stderr."""
    doc = {"benchmark": benchmark, "created": time.strftime("%Y-%m-%dT%H:%M:%S%z"), **fields}
    path.write_text(json.dumps(doc, indent=2) + "\n")
    progress(f"JSON written to {path}")


# =========================================================================== child processes


class StepError(RuntimeError):
    """A step failed; ``summary`` is its one-line (or error-and-fix) reason for the table and the JSON."""

    def __init__(self, message: str, summary: str | None = None):
        super().__init__(message)
        self.summary = message if summary is None else summary


def thread_env(threads: int, **extra: str) -> dict:
    """This process's environment with TVM's and OpenMP's thread counts set (and unbuffered Python)."""
    n = str(threads)
    return dict(os.environ, TVM_NUM_THREADS=n, OMP_NUM_THREADS=n, PYTHONUNBUFFERED="1", **extra)


def run_step(argv: list, env: dict, verbose: bool, what: str, **kw) -> subprocess.CompletedProcess:
    """Run ``argv`` from the repository root with stdout captured, and stderr too unless ``verbose``.

    On a non-zero exit raises StepError with the last 25 lines of its output; the summary is its
    last ``error: `` line onwards (tvmgen's error and fix), else its last line.
    """
    proc = subprocess.run(
        [str(a) for a in argv],
        env=env,
        cwd=ROOT,
        stdout=subprocess.PIPE,
        stderr=None if verbose else subprocess.PIPE,
        text=True,
        **kw,
    )
    if proc.returncode != 0:
        lines = (proc.stderr or proc.stdout or "").strip().splitlines()
        errors = [i for i, ln in enumerate(lines) if ln.startswith("error: ")]
        summary = "\n".join(lines[errors[-1] :]) if errors else (lines[-1] if lines else "no output")
        raise StepError(f"{what} failed (exit {proc.returncode}):\n" + "\n".join(lines[-25:]), summary)
    return proc


def build_cpp_harness(prefix: Path, work: Path, name: str, source: str, verbose: bool, env: dict | None = None) -> Path:
    """A C++ harness (``source``) built with the host g++ against the tvmgen runtime installed at ``prefix``
    (include/, lib/, found again at run time through the rpath): ``work``/``name``. StepError when it fails."""
    cxx = shutil.which("g++") or shutil.which("c++")
    if cxx is None:
        raise StepError("no host C++ compiler (g++): the C++ harness cannot be built (apt-get install g++)")
    src, exe, lib = work / f"{name}.cc", work / name, prefix / "lib"
    src.write_text(source)
    argv = [cxx, "-O2", "-std=c++17", f"-I{prefix / 'include'}", src, "-o", exe, f"-L{lib}", "-ltvmgen_runtime"]
    run_step([*argv, f"-Wl,-rpath,{lib}", f"-Wl,-rpath-link,{lib}"], env, verbose, "building the C++ harness")
    return exe


def last_json(proc: subprocess.CompletedProcess, what: str) -> dict:
    """The JSON object on the last line of a finished process's stdout; StepError without one."""
    try:
        return json.loads(proc.stdout.strip().splitlines()[-1])
    except (IndexError, ValueError) as e:
        raise StepError(f"{what} returned no JSON result ({e}): {proc.stdout[-500:]!r}", "no JSON result") from e


def serve_worker(compute) -> None:
    """In a worker child: run ``compute()`` with whatever anything prints sent to stderr, then write
    its result to stdout as one JSON line (what ``last_json`` reads)."""
    result_fd = os.dup(1)
    os.dup2(2, 1)
    sys.stdout = sys.stderr
    result = compute()
    sys.stderr.flush()
    with os.fdopen(result_fd, "w") as f:
        f.write(json.dumps(result) + "\n")


# =========================================================================== timing in one process


class Timed:
    """One contender in a round-robin: ``run()`` is the call timed; ``times_ms`` collects its timings."""

    def __init__(self, key: str, run):
        self.key, self.run = key, run
        self.times_ms: list[float] = []
        self.outputs = None

    def timed_run(self) -> None:
        """One call, timed with perf_counter; its result is kept in ``outputs``."""
        t0 = time.perf_counter()
        self.outputs = self.run()
        self.times_ms.append((time.perf_counter() - t0) * 1e3)


def _thread_cpu_ticks() -> int | None:
    """CPU time (clock ticks) used so far by this process's threads other than the main one."""
    try:
        tids = [t for t in os.listdir("/proc/self/task") if int(t) != os.getpid()]
    except OSError:
        return None
    total = 0
    for t in tids:
        try:
            fields = Path(f"/proc/self/task/{t}/stat").read_text().rsplit(")", 1)[1].split()
        except OSError:  # the thread ended
            continue
        total += int(fields[11]) + int(fields[12])  # utime, stime
    return total


def settle(limit_s: float = 1.0) -> float:
    """Wait until the last runtime's worker threads stop spinning; returns the seconds waited.

    After a parallel run TVM's pool threads spin (sched_yield) for ~0.3 s and OpenBLAS's for
    ~0.05 s; timing the next runtime meanwhile would measure their contention, not it.
    """
    t0 = time.perf_counter()
    before = _thread_cpu_ticks()
    if before is None:  # no /proc: wait out the longest spin seen
        time.sleep(0.3)
        return 0.3
    while time.perf_counter() - t0 < limit_s:
        time.sleep(0.03)
        now = _thread_cpu_ticks()
        if now == before:
            break
        before = now
    return time.perf_counter() - t0


def round_robin(contenders: list[Timed], warmup: int, runs: int, rounds: int, min_time: float) -> float:
    """Time every contender in ``rounds`` round-robin rounds; returns the seconds spent settling.

    Each is first warmed up (``warmup`` calls), which also sizes its block: ``rounds`` blocks give
    at least ``runs`` calls and about ``min_time`` seconds (at most 20 x ``runs`` calls). In each
    round every contender runs one block, the one going first rotating; before each block the
    machine settles (``settle``) and one untimed call refills the caches.
    """
    import math

    import numpy as np

    blocks = {}
    for r in contenders:
        settle()
        for _ in range(warmup):
            r.timed_run()
        typical_s = float(np.median(r.times_ms)) / 1e3 if r.times_ms else 0.0
        wanted = max(runs, min(20 * runs, math.ceil(min_time / typical_s) if typical_s else runs))
        blocks[r.key] = math.ceil(wanted / rounds)
        r.times_ms.clear()
    settled = 0.0
    for k in range(rounds):
        for r in contenders[k % len(contenders) :] + contenders[: k % len(contenders)]:  # who goes first rotates
            settled += settle()
            r.run()  # untimed: the previous contender evicted this one's data from the caches
            for _ in range(blocks[r.key]):
                r.timed_run()
    return settled


def paced(contenders: list[Timed], pace_s: float, runs: int, rounds: int) -> None:
    """Time every contender as an app calls a model once per camera frame: a sleep of ``pace_s`` before
    each timed call, so the cores idle and the caches cool in between. ``rounds`` blocks per contender,
    the one going first rotating, at least ``runs`` calls each."""
    import math

    for r in contenders:  # warm, in case nothing ran before
        r.run()
    block = math.ceil(runs / rounds)
    for k in range(rounds):
        for r in contenders[k % len(contenders) :] + contenders[: k % len(contenders)]:
            for _ in range(block):
                time.sleep(pace_s)
                r.timed_run()


# =========================================================================== statistics and tables


def _latency():
    """tvmgen's Latency type (core/latency.py), loaded from its file: it needs numpy alone, and the GPU
    benchmark's --run-only side runs in a Python where the tvmgen package (and TVM) cannot be imported."""
    import importlib.util
    import sys

    name = "tvmgen_core_latency"
    if name not in sys.modules:
        path = Path(__file__).resolve().parents[1] / "generator" / "tvmgen" / "core" / "latency.py"
        spec = importlib.util.spec_from_file_location(name, path)
        assert spec is not None and spec.loader is not None
        module = importlib.util.module_from_spec(spec)
        sys.modules[name] = module  # dataclasses look their module up while the class is made
        spec.loader.exec_module(module)
    return sys.modules[name].Latency


def median(xs):
    """The median of ``xs`` (the mean of the middle two for an even count); None when empty."""
    return _latency().from_samples(xs).median


def stats(values, unit: str, order=("median", "mean", "min", "p90", "max")) -> dict:
    """Median, mean, min, 90th percentile and max of ``values`` (any of tvmgen's Latency statistics can
    be named in ``order``: std, p99...) as floats, keyed e.g. ``median_ms`` for ``unit="ms"``, in ``order``."""
    return _latency().from_samples(values).flat(order, f"_{unit}")


def ratio(a, b):
    """``a / b``, or None where either is missing (or ``b`` is 0)."""
    return None if a is None or not b else a / b


def fmt_ratio(r, digits: int = 2) -> str:
    """A ratio as ``1.23x``; ``-`` for None."""
    return "-" if r is None else f"{r:.{digits}f}x"


def fmt_num(x, large: float = 100, digits: int = 2) -> str:
    """One decimal from ``large`` up, else ``digits`` decimals; ``-`` for None."""
    if x is None:
        return "-"
    return f"{x:.1f}" if x >= large else f"{x:.{digits}f}"


def table(header: list[str], body: list[list[str] | None], right: set[int]) -> str:
    """Aligned columns under ``header`` and a dashed line; the column indexes in ``right`` are
    right-aligned. A None row in ``body`` is another dashed line; short rows are padded."""
    rows = [header, None, *body]
    n = max(len(x) for x in rows if x)
    rows = [x + [""] * (n - len(x)) if x else x for x in rows]
    widths = [max(len(x[i]) for x in rows if x) for i in range(n)]

    def line(cells):
        if cells is None:
            return "  ".join("-" * w for w in widths)
        padded = (c.rjust(w) if i in right else c.ljust(w) for i, (c, w) in enumerate(zip(cells, widths)))
        return "  ".join(padded).rstrip()

    return "\n".join(map(line, rows))


# =========================================================================== OpenCL


def opencl_runtime(prefix: Path | None, work: Path, log) -> Path:
    """An installed runtime prefix with libtvmgen_opencl: the one given, else the host runtime built (cmake)
    once per version of jni/'s sources, in the user cache (``runtime_build.cached_build``)."""
    from tvmgen.runtime import runtime_build

    if prefix is None:
        log("the host runtime (cmake, reused from the user cache while jni/ is unchanged) ...")
        prefix = runtime_build.cached_build("host")
    if not (prefix / "lib" / "libtvmgen_opencl.so").is_file():
        raise SystemExit(f"{prefix}/lib has no libtvmgen_opencl.so")
    return prefix


def opencl_setup(runtime: Path | None, keep: Path | None, prefix: str, log) -> tuple[Path, Path]:
    """The work directory (``keep``, else a new temporary one, not removed) and the tvmgen-run of
    an OpenCL runtime (``opencl_runtime``)."""
    work = Path(keep or tempfile.mkdtemp(prefix=prefix)).absolute()
    work.mkdir(parents=True, exist_ok=True)
    return work, opencl_runtime(runtime, work, log) / "bin" / "tvmgen-run"


def tvmgen_run(
    runner: Path, artifact: Path, work: Path, env: dict, warmup: int, repeat: int, tag: str, extra: tuple[str, ...] = ()
) -> tuple[dict, str, float]:
    """One tvmgen-run process with ``--timings WORK/TAG.json``: its timings, its stderr and its wall
    time in ms. Exits with its stderr if it fails."""
    timings = work / f"{tag}.json"
    t0 = time.perf_counter()
    proc = subprocess.run(
        [
            str(runner),
            str(artifact),
            "--warmup",
            str(warmup),
            "--repeat",
            str(repeat),
            "--timings",
            str(timings),
            *extra,
        ],
        capture_output=True,
        text=True,
        env=env,
        timeout=1200,
    )
    wall = (time.perf_counter() - t0) * 1e3
    if proc.returncode != 0:
        raise SystemExit(f"tvmgen-run failed ({tag}):\n{proc.stderr}")
    return json.loads(timings.read_text()), proc.stderr, wall
