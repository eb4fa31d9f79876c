"""Result files of every kind read into one shape, for the QA report (`tvmgen report`).

The JSON files tvmgen writes describe a run each in their own words:

- ``tvmgen run --json`` (optionally ``--profile``): ``timings`` (load, init, first run, median, runs_ms),
  ``memory``, ``outputs``, ``profile``;
- ``tvmgen bench --json`` over RPC: ``cold_ms``, ``warm_ms`` statistics and ``warm_samples_ms``, copies,
  ``device`` (what the device server reports), ``check`` against the reference;
- the deploy app's ``tvmgen-results.json`` (``tvmgen app --run``): ``timings`` from the Java API, every timed run
  and the copies around it (``runs_ms``, ``copy_in_runs_ms``, ``copy_out_runs_ms``), a ``warm_start``, ``memory``,
  the device's raw ``profile``, ``outputs`` and, when ``app`` pulled it, the phone's properties (``phone``) and
  the outputs checked against the host's reference (``check``);
- ``benchmarks/gpu.py --json`` and ``benchmarks/speed.py --json``: a table, one row per model and build.

:func:`load` detects which it is and returns :class:`Run` records (a benchmark table gives one per row).
A field a result does not have stays ``None``: the report writes "not reported" for it. Every latency
statistic in them, whatever its keys, is read by :meth:`tvmgen.core.latency.Latency.read`.
"""

from __future__ import annotations

import json
import math
import platform
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np

from tvmgen.core import artifact
from tvmgen.core.errors import InputError
from tvmgen.core.latency import Latency

KINDS = {
    "run": "tvmgen run --json",
    "bench": "tvmgen bench --json (RPC)",
    "app": "the deploy app (tvmgen app --run)",
    "gpu-benchmark": "benchmarks/gpu.py --json",
    "speed-benchmark": "benchmarks/speed.py --json",
}

# The metrics compared across runs: key -> (label, unit, lower is better). All are "lower is better".
METRICS = {
    "p50_ms": ("steady run p50", "ms"),
    "p90_ms": ("steady run p90", "ms"),
    "p99_ms": ("steady run p99", "ms"),
    "first_run_ms": ("first run (cold)", "ms"),
    "init_ms": ("init", "ms"),
    "load_ms": ("load", "ms"),
    "copy_in_ms": ("copy-in", "ms"),
    "copy_out_ms": ("copy-out", "ms"),
    "peak_bytes": ("peak resident memory", "bytes"),
    "max_abs_error": ("max abs error vs reference", ""),
}


@dataclass
class Run:
    """One run of one model on one device, as the report shows it; None means "not reported"."""

    source: str  # the file it came from (with "#row" for a benchmark table's row)
    kind: str  # a key of KINDS
    model: str | None = None
    label: str = ""
    artifact: dict = field(default_factory=dict)  # target, device, precision, platform, library bytes, sha256
    device: dict = field(default_factory=dict)  # label -> value, only what the result reports
    latency: dict = field(default_factory=dict)  # load/init/first_run/warm_first/copy_in/copy_out, p50/p90/p99...
    samples_ms: list[float] = field(default_factory=list)  # the steady runs, one per run
    profile: dict | None = None  # kernels (slowest first), kinds, clock, runs
    memory: dict = field(default_factory=dict)  # before_load, after_load_peak, overall_peak (bytes)
    check: list[dict] | None = None  # per output: name, max_abs, max_rel, top5 agreement
    reference: str | None = None
    outputs: list[dict] | None = None  # summaries of the outputs (run --json, the app)
    error: str | None = None  # the run failed: the result holds only this
    notes: list[str] = field(default_factory=list)

    def metrics(self) -> dict[str, float | None]:
        lat = self.latency
        return {
            "p50_ms": lat.get("p50_ms"),
            "p90_ms": lat.get("p90_ms"),
            "p99_ms": lat.get("p99_ms"),
            "first_run_ms": lat.get("first_run_ms"),
            "init_ms": lat.get("init_ms"),
            "load_ms": lat.get("load_ms"),
            "copy_in_ms": lat.get("copy_in_ms"),
            "copy_out_ms": lat.get("copy_out_ms"),
            "peak_bytes": self.memory.get("overall_peak_bytes"),
            "max_abs_error": max((c["max_abs"] for c in self.check if c.get("max_abs") is not None), default=None)
            if self.check
            else None,
        }


def load(path: Path, artifact_dir: Path | None = None) -> list[Run]:
    """The runs in one result file; raises InputError naming the file and the fix when it cannot be read."""
    if not path.is_file():
        raise InputError(
            f"result file {path} does not exist",
            "give the JSON a tvmgen command wrote: tvmgen run --json > r.json, tvmgen bench --json r.json, "
            "or the tvmgen-results.json that tvmgen app --run pulls",
        )
    try:
        doc = json.loads(path.read_text())
    except (UnicodeDecodeError, json.JSONDecodeError) as e:
        raise InputError(
            f"result file {path} is not JSON ({e})",
            "give the JSON file itself (tvmgen run --json prints it on stdout: redirect only stdout into the file)",
        ) from None
    kind = detect(doc)
    if kind is None:
        keys = ", ".join(list(doc)[:8]) if isinstance(doc, dict) else type(doc).__name__
        raise InputError(
            f"result file {path} is not a result tvmgen knows (its keys: {keys})",
            "the report reads " + "; ".join(KINDS.values()),
        )
    runs = READERS[kind](doc, str(path))
    recorded = Path(doc["artifact"]) if kind == "run" and isinstance(doc.get("artifact"), str) else None
    if artifact_dir is None and recorded is not None and (recorded / artifact.MANIFEST).is_file():
        artifact_dir = recorded  # tvmgen run --json names the artifact it ran: still here, so its manifest is known
    if artifact_dir is not None:
        art = artifact_summary(artifact_dir)
        for r in runs:
            r.artifact.update(art)
            r.model = r.model or art["model"]
            r.label = r.label if r.label != Path(path).stem else r.model or r.label
    return runs


def detect(doc) -> str | None:
    """Which producer wrote ``doc``: a key of KINDS, or None."""
    if not isinstance(doc, dict):
        return None
    if doc.get("benchmark") == "gpu" and isinstance(doc.get("rows"), list):
        return "gpu-benchmark"
    if doc.get("benchmark") == "speed" and isinstance(doc.get("rows"), list):
        return "speed-benchmark"
    if "warm_samples_ms" in doc or ("cold_ms" in doc and "warm_ms" in doc):
        return "bench"
    timings = doc.get("timings")
    if isinstance(timings, dict) and "median_ms" in timings:
        return "run"
    if (isinstance(timings, dict) and "run_ms" in timings) or set(doc) == {"error"}:
        return "app"
    return None


def artifact_summary(directory: Path) -> dict:
    """What the report shows of an artifact: target, device, precision, library size and hash."""
    m = artifact.load(directory, verify=False)
    lib = m.files.get(m.export["library"], {})
    return {
        "directory": str(directory),
        "platform": m.platform,
        "device": m.device,
        "target": m.target.get("kind", "?") + (f" {m.target['mtriple']}" if m.target.get("mtriple") else ""),
        "precision": m.precision,
        "library": m.export["library"],
        "library_bytes": lib.get("bytes"),
        "sha256": lib.get("sha256"),
        "total_bytes": sum(f["bytes"] for f in m.files.values()) or None,
        "model_sha256": m.model.get("sha256"),
        "model": m.model.get("name"),
    }


# ------------------------------------------------------------------ the readers, one per kind


def _steady(run: Run, lat: Latency) -> None:
    """The steady runs (where the result kept them one by one) and the statistics it reports of them."""
    run.samples_ms = list(lat.samples)
    stats = lat.flat(("p50", "p90", "p99", "min", "max", "mean"), "_ms")
    run.latency.update({k: v for k, v in stats.items() if v is not None})
    if lat.count is not None:
        run.latency["runs"] = lat.count


def _median(stats, otherwise: float | None = None) -> float | None:
    """The median of latency statistics in any shape (or of a list of samples); ``otherwise`` when not known."""
    m = Latency.read(stats).median
    return otherwise if m is None else m


def _profile(p: dict | None, device: str = "cpu") -> dict | None:
    """A profile as ``tvmgen run --profile``/bench write it (rows), or the device's raw counts (the app)."""
    if not p:
        return None
    if "counts" in p or "counts" in p.get("profile", {}):
        from tvmgen.reports.profile import Profile

        p = Profile.from_device(p, None, device).to_json()
    return _profile_shares(
        {
            "kernels": p.get("kernels", []),
            "kinds": p.get("kinds", []),
            "clock": p.get("clock"),
            "runs": p.get("runs"),
            "whole_run_ms": p.get("whole_run_ms"),
        }
    )


def _profile_shares(p: dict) -> dict:
    """Each kernel's and kind's share of the profiled runs' own time (the sum of every call the profiler timed,
    the VM's builtins included), so that the kinds add up to 100%. The shares the profile carries are of the
    plain runs' median, which the profiler's own overhead makes smaller than the profiled runs: those add up
    to more than 100%."""
    profiled = sum(k.get("total_ms") or 0.0 for k in p["kinds"]) or sum(k.get("total_ms") or 0.0 for k in p["kernels"])
    if not profiled:
        return p

    def share(rows: list[dict]) -> list[dict]:
        return [{**row, "share": (row.get("total_ms") or 0.0) / profiled} for row in rows]

    return {**p, "kernels": share(p["kernels"]), "kinds": share(p["kinds"]), "profiled_ms": profiled}


def host_cpu() -> str | None:
    """This machine's CPU model: /proc/cpuinfo's model name (Hardware on some ARM kernels), else
    platform.processor()."""
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            key, _, value = line.partition(":")
            if key.strip() in ("model name", "Hardware") and value.strip():
                return value.strip()
    except OSError:
        pass
    return platform.processor() or None


def _memory(m: dict | None) -> dict:
    if not m or m.get("source") == "unavailable":
        return {}
    return {k: m[k] for k in ("before_load_bytes", "after_load_peak_bytes", "overall_peak_bytes") if m.get(k)}


def read_run(doc: dict, source: str) -> list[Run]:
    t = doc["timings"]
    r = Run(source, "run", model=doc.get("model"))
    r.latency = {k: t.get(k) for k in ("load_ms", "init_ms", "first_run_ms")}
    steady = Latency.read(doc.get("runs_ms") or t)
    _steady(r, steady)
    if not steady.samples and not steady.empty:
        r.notes.append("the steady runs one by one are not in this result (tvmgen run --json from an older tvmgen)")
    host: dict = doc["host"] if isinstance(doc.get("host"), dict) else {}
    cpu = host.get("cpu")
    if cpu is None:
        cpu = host_cpu()
        if cpu:
            r.notes.append(
                "the CPU shown is that of the machine writing this report: this result does not record the CPU it ran on"
            )
    r.device = {
        "host": host.get("name") or "the machine that ran tvmgen run",
        "CPU": cpu,
        "GPU": host.get("gpu"),
        "GPU driver": host.get("gpu_driver"),
        "threads": doc.get("threads"),
        "thread pool": doc.get("thread_pool"),
    }
    r.memory = _memory(doc.get("memory"))
    r.profile = _profile(doc.get("profile"))
    r.outputs = doc.get("outputs")
    r.check, r.reference = doc.get("check"), doc.get("reference")
    r.label = r.model or Path(source).stem
    _per_step(r, doc)
    return [r]


PER_STEP = "a streaming model: each timed run is one step, the state carried from the step before"


def _per_step(r: Run, doc: dict) -> None:
    """A streaming model's result (``per_step``: `run`, `run --sequence`, `bench`) says so in its label and
    notes: its latencies are those of one step."""
    if doc.get("per_step"):
        r.label += " (per step)"
        seq = doc.get("sequence")
        r.notes.append(PER_STEP + (f"; {seq['steps']} steps in order" if isinstance(seq, dict) else ""))


def read_bench(doc: dict, source: str) -> list[Run]:
    r = Run(source, "bench", model=doc.get("model"))
    info = doc.get("device") or {}
    r.device = {
        "key": info.get("key"),
        "machine": info.get("machine"),
        "OS": info.get("os"),
        "kernel": info.get("kernel"),
        "ABI": info.get("abi"),
        "arch": info.get("arch"),
        "devices": ", ".join(info["devices"]) if isinstance(info.get("devices"), list) else info.get("devices"),
        "CPU": info.get("cpu"),
        "GPU": info.get("gpu"),
        "GPU driver": info.get("gpu_driver"),
    }
    r.artifact = {"platform": doc.get("platform"), "device": doc.get("dev")}
    cold = doc.get("cold_ms") or {}
    r.latency = {
        "load_ms": cold.get("load"),
        "init_ms": cold.get("init"),
        "first_run_ms": cold.get("first_run"),
        "upload_ms": cold.get("upload"),
        **{f"{k}_ms": _median(doc.get(f"{k}_ms"), cold.get(k)) for k in ("copy_in", "copy_out")},
    }
    _steady(r, Latency.read(doc.get("warm_samples_ms") or doc.get("warm_ms")))
    r.memory = _memory(doc.get("memory"))
    r.profile = _profile(doc.get("profile"), doc.get("dev") or "cpu")
    r.check, r.reference = doc.get("check"), doc.get("reference")
    r.label = f"{r.model or '?'} on {info.get('key') or info.get('machine') or 'the device'}"
    _per_step(r, doc)
    return [r]


def read_app(doc: dict, source: str) -> list[Run]:
    r = Run(source, "app", model=doc.get("model"))
    if "error" in doc and "timings" not in doc:
        r.error = str(doc["error"])
        r.label = f"{Path(source).stem} (failed)"
        return [r]
    t = doc.get("timings") or {}
    phone = doc.get("phone") or {}
    r.device = {
        "model": phone.get("model"),
        "manufacturer": phone.get("manufacturer"),
        "SoC": phone.get("soc") or phone.get("board"),
        "Android": phone.get("android"),
        "API level": phone.get("sdk"),
        "ABI": phone.get("abi"),
        "GPU": phone.get("gpu"),
        "GPU driver": phone.get("gpu_driver"),
        "runtime device": doc.get("device"),
    }
    r.artifact = {"asset": doc.get("artifact"), "device": doc.get("device")}
    copies = {k: doc.get(f"{k}_runs_ms") for k in ("copy_in", "copy_out")}  # one per timed run: their median
    r.latency = {
        "load_ms": t.get("load_ms"),
        "init_ms": t.get("init_ms"),
        "first_run_ms": t.get("first_run_ms"),
        "warm_first_run_ms": (doc.get("warm_start") or {}).get("first_run_ms"),
        **{f"{k}_ms": _median(v, t.get(f"{k}_ms")) for k, v in copies.items()},
    }
    steady = Latency.read(doc)  # runs_ms, or an older app's median_run_ms, min_run_ms, iterations
    _steady(r, steady)
    if not steady.samples:
        r.notes.append("the timed runs one by one are not in this result (a deploy app from an older tvmgen)")
    if doc.get("fallback"):
        r.notes.append(f"fell back to the CPU: {doc['fallback']}")
    r.memory = _memory(doc.get("memory"))
    r.profile = _profile(doc.get("profile"), doc.get("device") or "cpu")
    r.outputs = doc.get("outputs")
    r.check, r.reference = doc.get("check"), doc.get("reference")
    if doc.get("check_skipped"):
        r.notes.append(f"outputs not checked against the host's reference: {doc['check_skipped']}")
    r.label = f"{r.model or '?'} on {phone.get('model') or 'the phone'} ({doc.get('device') or '?'})"
    return [r]


def read_gpu_benchmark(doc: dict, source: str) -> list[Run]:
    runs = []
    machine = doc.get("machine") or {}
    for i, row in enumerate(doc["rows"]):
        r = Run(f"{source}#{i}", "gpu-benchmark", model=row.get("model"))
        r.label = f"{row.get('model', '?')} {row.get('id', '')}".strip()
        r.device = _machine_fields(machine)
        r.artifact = {"device": row.get("device"), "precision": row.get("precision"), "directory": row.get("artifact")}
        if row.get("error"):
            r.error = str(row["error"])
            runs.append(r)
            continue
        cold = [c.get("first_run_ms") for c in row.get("cold", []) if c.get("first_run_ms") is not None]
        warm = [c.get("first_run_ms") for c in row.get("warm", []) if c.get("first_run_ms") is not None]
        steady = row.get("steady") or {}
        r.latency = {
            "load_ms": steady.get("load_ms"),
            "init_ms": steady.get("init_ms"),
            "first_run_ms": _median(cold),
            "warm_first_run_ms": _median(warm),
            "copy_in_ms": _median(steady.get("copy_in_ms")),
            "copy_out_ms": _median(steady.get("copy_out_ms")),
        }
        _steady(r, Latency.read(steady.get("run_ms")))  # tvmgen-run's median, mean, min, max
        r.memory = _memory(steady.get("memory"))
        if row.get("max_abs_error") is not None:
            r.check, r.reference = [{"name": "outputs", "max_abs": row["max_abs_error"]}], "the CPU build"
        runs.append(r)
    return runs


def _machine_fields(machine: dict) -> dict:
    """benchmarks/gpu.py's machine: its CPU model, and the GPU name and driver nvidia-smi gave ("name, driver")."""
    d = {k: v for k, v in machine.items() if isinstance(v, str | int | float) and k not in ("cpu", "nvidia_smi", "gpu")}
    gpu = machine.get("nvidia_smi") or machine.get("gpu")
    name, _, driver = str(gpu).partition(", ") if gpu else ("", "", "")
    return {
        **d,
        "CPU": machine.get("cpu"),
        "GPU": name or None,
        "GPU driver": machine.get("gpu_driver") or driver or None,
    }


def read_speed_benchmark(doc: dict, source: str) -> list[Run]:
    runs = []
    for i, row in enumerate(doc["rows"]):
        r = Run(f"{source}#{i}", "speed-benchmark", model=row.get("model"))
        r.label = f"{row.get('model', '?')} at {row.get('threads', '?')} thread(s)"
        r.device = {
            "host": doc.get("host") or "the machine that ran benchmarks/speed.py",
            "CPU": doc.get("cpu"),
            "threads": row.get("threads"),
            "thread pool": row.get("thread_pool"),
        }
        if row.get("error"):
            r.error = str(row["error"])
            runs.append(r)
            continue
        quiet = row.get("quiet") or {}
        r.latency = {"p50_ms": quiet.get("tvmgen")}  # a median: the one statistic speed.py keeps
        if quiet.get("reference") is not None:
            r.notes.append(
                f"{row.get('reference', 'the reference')} median {quiet['reference']:.3f} ms on the same host"
            )
        if row.get("outputs"):
            r.notes.append(f"outputs against {row.get('reference', 'the reference')}: {row['outputs']}")
        runs.append(r)
    return runs


READERS = {
    "run": read_run,
    "bench": read_bench,
    "app": read_app,
    "gpu-benchmark": read_gpu_benchmark,
    "speed-benchmark": read_speed_benchmark,
}


# ------------------------------------------------------------------ comparison


# The metrics that are statistics of the steady runs: a change in them is tested over the runs one by one.
SAMPLED = ("p50_ms", "p90_ms", "p99_ms")
# The one metric compared by the threshold alone: the outputs' error against the reference does not vary from
# run to run (same inputs, same build); every other metric is a measurement, noisy, and needs its samples.
EXACT = ("max_abs_error",)
ALPHA = 0.05  # a change is flagged when a one-sided rank test gives p below this
NO_SAMPLES = "not tested (no samples)"


@dataclass
class Change:
    metric: str
    base: float
    value: float
    change: float  # relative: (value - base) / base
    # "regression" / "improvement" (beyond the threshold, and beyond the runs' spread), "same" (within the
    # threshold), "noise" (beyond the threshold, within the spread) or "untested" (beyond it, no samples to test)
    verdict: str
    test: str = ""  # how it was decided, as the page says it: the rank test's p and n, or why not tested
    p_value: float | None = None
    n: tuple[int, int] | None = None  # samples: the baseline's, this run's


def rank_test(base: list[float], new: list[float]) -> tuple[float, float]:
    """Mann-Whitney U test of ``new`` against ``base``, one-sided both ways: (p that new is not slower, p that
    new is not faster). The normal approximation with the tie correction and a continuity correction;
    deterministic (no resampling)."""
    a, b = np.asarray(base, dtype=float), np.asarray(new, dtype=float)
    n1, n2 = len(a), len(b)
    n = n1 + n2
    _, inverse, counts = np.unique(np.concatenate([a, b]), return_inverse=True, return_counts=True)
    ranks = (np.cumsum(counts) - (counts - 1) / 2)[inverse]  # average ranks, 1-based
    u = float(ranks[n1:].sum()) - n2 * (n2 + 1) / 2  # pairs where new is the slower (ties count half)
    ties = float((counts.astype(float) ** 3 - counts).sum())
    var = n1 * n2 / 12 * ((n + 1) - ties / (n * (n - 1)))
    if var <= 0:
        return 1.0, 1.0  # every run took the same time on both sides
    mu, sd = n1 * n2 / 2, math.sqrt(var)
    slower = 0.5 * math.erfc((u - mu - 0.5) / sd / math.sqrt(2))
    faster = 0.5 * math.erfc((mu - u - 0.5) / sd / math.sqrt(2))
    return min(slower, 1.0), min(faster, 1.0)


def _fmt_p(p: float) -> str:
    return "p<0.001" if p < 0.001 else f"p={p:.2g}"


def judge(metric: str, base: Run, run: Run, b: float, value: float, threshold: float) -> Change:
    """The verdict on one metric of ``run`` against ``base``: beyond the threshold and, for a measurement,
    beyond the runs' spread (a one-sided Mann-Whitney U test over the steady runs, p < ALPHA)."""
    rel = (value - b) / abs(b)
    change = Change(metric, b, value, rel, "same")
    if metric in SAMPLED and len(base.samples_ms) >= 2 and len(run.samples_ms) >= 2:
        change.n = (len(base.samples_ms), len(run.samples_ms))
        slower, faster = rank_test(base.samples_ms, run.samples_ms)
        change.p_value = slower if rel > 0 else faster
        change.test = f"rank test {_fmt_p(change.p_value)}, n={change.n[0]}/{change.n[1]}"
    elif metric in EXACT:
        change.test = "threshold only (the same for every run)"
    else:
        change.test = NO_SAMPLES
    if abs(rel) <= threshold:
        return change
    if metric in EXACT or (change.p_value is not None and change.p_value < ALPHA):
        change.verdict = "regression" if rel > 0 else "improvement"
    else:
        change.verdict = "noise" if change.p_value is not None else "untested"
    return change


def compare(runs: list[Run], threshold: float) -> list[dict[str, Change]]:
    """Each run against the first: per metric both report, the relative change and its verdict (judge)."""
    base = runs[0].metrics()
    out = []
    for r in runs:
        changes = {}
        for key, value in r.metrics().items():
            b = base.get(key)
            if value is None or b is None or b == 0:
                continue
            changes[key] = judge(key, runs[0], r, b, value, threshold)
        out.append(changes)
    return out


def regressions(runs: list[Run], threshold: float) -> list[tuple[Run, Change]]:
    """The changes flagged as regressions: beyond the threshold and beyond the runs' spread."""
    if len(runs) < 2:
        return []
    return [
        (r, c)
        for r, ch in zip(runs[1:], compare(runs, threshold)[1:])
        for c in ch.values()
        if c.verdict == "regression"
    ]


def file_name(source: str) -> str:
    """A result's file name, with a benchmark table's "#row"."""
    path, _, row = source.partition("#")
    return Path(path).name + (f"#{row}" if row else "")


def _machine_name(r: Run) -> str | None:
    d = r.device
    return d.get("model") or d.get("key") or d.get("CPU") or d.get("machine")


# What may tell compared results apart, in the order a column names them.
DIFFERENCES = (
    ("model", lambda r: r.model),
    ("threads", lambda r: r.device.get("threads")),
    ("device", lambda r: r.artifact.get("device")),
    ("machine", _machine_name),
    ("GPU", lambda r: r.device.get("GPU")),
    ("precision", lambda r: r.artifact.get("precision")),
    ("build", lambda r: (r.artifact.get("sha256") or "")[:10] or None),
    ("platform", lambda r: r.artifact.get("platform")),
)


def column_names(runs: list[Run]) -> list[str]:
    """A name per compared result, from what differs between them (threads, device, machine, precision, the
    library's hash, platform): "threads 4, build 3fa2c01b9e". Results that nothing tells apart are named by
    their file; two alike on every field but from different files get the file name added."""
    if len(runs) < 2:
        return [r.label for r in runs]
    parts: list[list[str]] = [[] for _ in runs]
    for name, get in DIFFERENCES:
        values = [get(r) for r in runs]
        if len({str(v) for v in values}) > 1:
            for p, v in zip(parts, values):
                p.append(f"{name} {v if v is not None else '?'}")
    names = [", ".join(p) for p in parts]
    alike = {n for n in names if names.count(n) > 1}
    names = [(f"{n} · " if n else "") + file_name(r.source) if n in alike else n for n, r in zip(names, runs)]
    if len(set(names)) < len(names):  # the same file given twice
        names = [f"{n} [{i + 1}]" for i, n in enumerate(names)]
    return names


def distinct_labels(runs: list[Run]) -> None:
    """Make the runs' labels tell them apart: runs sharing a label get their result file's name added
    ("tiny (r1.json)"), so the columns of a comparison are never two alike."""
    by_label: dict[str, list[Run]] = {}
    for r in runs:
        by_label.setdefault(r.label, []).append(r)
    for same in by_label.values():
        if len(same) > 1:
            for r in same:
                r.label = f"{r.label} ({Path(r.source).name})" if r.source else r.label
