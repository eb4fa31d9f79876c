"""gpu.py's run phase: python3 + numpy only, no tvm and no tvmgen (the GPU machine has neither); and what
the build phase shares with it: the rows, the plan's name, the log."""

from __future__ import annotations

import json
import os
import re
import shutil
import subprocess
import sys
import time
from pathlib import Path

import benchlib
from gpu_table import fmt, machine, med, report

PLAN = "plan.json"
STATS = re.compile(r"tvmgen-(?:opencl|vulkan): cache (\{.*\})")
PLATFORM = re.compile(r"tvmgen-opencl: (.*)")
VULKAN_DEVICE = re.compile(r"tvmgen-vulkan: (device .*)")
VULKAN_COMMANDS = re.compile(r"tvmgen-vulkan: commands (\{.*\})")
CUDA_SHIM = "libtvmgen_cuda_kernels.so"


def log(msg: str) -> None:
    benchlib.progress(msg)


def variants(args) -> list[dict]:
    """The rows per model: cpu (the reference), then the GPU devices asked for, in each precision."""
    precisions = ["fp32"] + (["fp16"] if "fp16" in args.precision.split(",") else [])
    gpus = [("opencl", "generic")]
    for family in args.gpu_family.split(","):
        if family in ("adreno", "desktop"):
            gpus.append(("opencl", family))
        elif family != "generic":
            raise SystemExit(f"--gpu-family: unknown family {family!r} (generic, adreno, desktop)")
    if args.cuda:
        gpus.append(("cuda", None))
    if args.vulkan:
        gpus.append(("vulkan", None))
    out = [] if args.no_cpu else [{"id": "cpu", "device": "cpu", "family": None, "precision": "fp32"}]
    for device, family in gpus:
        for p in precisions:
            vid = device + (f"-{family}" if family and family != "generic" else "") + ("" if p == "fp32" else f"-{p}")
            out.append({"id": vid, "device": device, "family": family, "precision": p})
    return out


def _start(
    runner: Path, art: Path, env: dict, ins: list[str], warmup: int, runs: int, tmp: Path, out_dir: Path | None = None
) -> dict:
    """One tvmgen-run process: its timings JSON plus wall time, cache counters and platform line."""
    timings = tmp / "timings.json"
    timings.unlink(missing_ok=True)
    cmd = [str(runner), str(art), *ins, "--warmup", str(warmup), "--repeat", str(runs), "--timings", str(timings)]
    if out_dir is not None:
        cmd += ["-o", str(out_dir)]
    t0 = time.perf_counter()
    proc = subprocess.run(cmd, capture_output=True, text=True, env=env, timeout=3600)
    wall = (time.perf_counter() - t0) * 1e3
    if proc.returncode != 0 or not timings.is_file():
        raise RuntimeError(_run_error(proc))
    t = json.loads(timings.read_text())
    t["wall_ms"] = wall
    m = STATS.search(proc.stderr)
    t["cache"] = json.loads(m.group(1)) if m else None
    p = [
        ln
        for ln in (PLATFORM.match(x) for x in proc.stderr.splitlines())
        if ln and "cache {" not in ln.group(1) and "rebuil" not in ln.group(1) and "platform" in ln.group(1)
    ]
    # the runtime's line naming the library, platform and device 0 with its limits; other lines that say
    # "platform" (the helpers' timeline: "platform and device found (at 60 ms)") come before it when the build
    # helpers start early
    main = [m for m in p if "device 0:" in m.group(1)]
    t["platform_line"] = (main or p)[0].group(1) if p else None
    v = VULKAN_DEVICE.search(proc.stderr)
    if v:
        t["vulkan_device"] = v.group(1)
    c = VULKAN_COMMANDS.search(proc.stderr)
    if c:
        t["vulkan_commands"] = json.loads(c.group(1))
    return t


def _run_error(proc) -> str:
    """tvmgen-run's error (its "tvmgen-run: error:" line and the two after it), else its last line."""
    lines = [
        ln.strip()
        for ln in proc.stderr.splitlines()
        if ln.strip() and not ln.startswith(("tvmgen-opencl: cache", "tvmgen-vulkan: ")) and "Warning:" not in ln
    ]
    at = next((i for i, ln in enumerate(lines) if ln.startswith("tvmgen-run: error:")), None)
    if at is None:
        return (lines[-1] if lines else f"exit {proc.returncode}")[:400]
    return " | ".join(lines[at : at + 3]).replace("tvmgen-run: error: ", "")[:400]


def _fresh(*dirs: Path) -> None:
    for d in dirs:
        shutil.rmtree(d, ignore_errors=True)
        d.mkdir(parents=True)


def _start_env(row: dict, work: Path, tmp: Path) -> tuple[dict, list[Path]]:
    """The environment of a row's starts (its caches under TMP, logs on) and those caches (emptied: a cold start)."""
    caches = [tmp / "kernel-cache", tmp / "pocl-cache", tmp / "nv-cache", tmp / "vk-cache", tmp / "nv-gl-cache"]
    caches.append(tmp / "mesa-cache")
    env = dict(
        os.environ,
        TVMGEN_OPENCL_CACHE_DIR=str(caches[0]),
        TVMGEN_OPENCL_LOG="1",
        POCL_CACHE_DIR=str(caches[1]),
        CUDA_CACHE_PATH=str(caches[2]),
        TVMGEN_VULKAN_CACHE_DIR=str(caches[3]),
        TVMGEN_VULKAN_LOG="1",
        __GL_SHADER_DISK_CACHE_PATH=str(caches[4]),  # NVIDIA's Vulkan driver's own cache
        MESA_SHADER_CACHE_DIR=str(caches[5]),  # lavapipe's
    )
    if row["device"] == "cuda":
        shim = work / "runtime" / "lib" / CUDA_SHIM
        env["LD_PRELOAD"] = ":".join(x for x in (str(shim), os.environ.get("LD_PRELOAD", "")) if x)
        env["TVMGEN_CUDA_KERNELS_DIR"] = str(work / "cuda-kernels")
    return env, caches


def _inputs(model: dict, work: Path) -> list[str]:
    return [a for i in model.get("inputs", []) for a in ("-i", f"{i['name']}={work / i['file']}")]


def run_row(row: dict, model: dict, work: Path, args, runner: Path) -> dict:
    import numpy as np

    art = work / row["artifact"]
    tmp = work / "run" / Path(row["artifact"]).name
    _fresh(tmp)
    env, caches = _start_env(row, work, tmp)
    ins = _inputs(model, work)
    out = {"cold": [], "warm": []}
    for r in range(args.repeat):
        _fresh(*caches)
        log(f"  cold start {r + 1}/{args.repeat} ...")
        out["cold"].append(_start(runner, art, env, ins, 0, 1, tmp))
    for r in range(args.repeat):
        log(f"  warm start {r + 1}/{args.repeat} ...")
        # the outputs checked are a first run's: a streaming model's later runs start from the state its
        # earlier ones left, and the reference is one step from the initial state
        last = r == args.repeat - 1
        out["warm"].append(_start(runner, art, env, ins, 0, 1, tmp, tmp / "out" if last else None))
    log(f"  steady: {args.runs} runs ...")
    out["steady"] = _start(runner, art, env, ins, 1, args.runs, tmp)
    if row["device"] == "vulkan":  # the same without recorded runs: the VM launches every run's kernels
        log(f"  steady, the VM every run (TVMGEN_VULKAN_REPLAY=0): {args.runs} runs ...")
        out["steady_vm"] = _start(runner, art, {**env, "TVMGEN_VULKAN_REPLAY": "0"}, ins, 1, args.runs, tmp)
    errs = []
    for o in model.get("outputs", []):
        a = np.load(tmp / "out" / o["file"]).astype(np.float64)
        e = np.load(work / o["ref"]).astype(np.float64)
        errs.append(float(np.max(np.abs(a - e))) if a.size else 0.0)
    out["max_abs_error"] = max(errs) if errs else None
    shutil.rmtree(tmp, ignore_errors=True)
    return out


def _load_plan(work: Path) -> dict:
    plan_file = work / PLAN
    if not plan_file.is_file():
        sys.exit(f"gpu.py: {plan_file} not found: make it with --build-only --work {work}")
    return json.loads(plan_file.read_text())


def run_all(args, work: Path) -> int:
    plan = _load_plan(work)
    runner = work / "runtime" / "bin" / "tvmgen-run"
    models = {m["name"]: m for m in plan["models"]}
    results = []
    for k, row in enumerate(plan["rows"], 1):
        log(f"[{k}/{len(plan['rows'])}] {row['model']} {row['id']}")
        res = dict(row)
        if "error" not in row:
            try:
                res.update(run_row(row, models[row["model"]], work, args, runner))
            except Exception as e:
                res["error"] = f"run failed: {e}"
                log(f"  {res['error']}")
        results.append(res)
    print(report(plan, results, args))
    if args.json:
        benchlib.write_json(
            args.json,
            "gpu",
            {
                "plan": {k: v for k, v in plan.items() if k != "rows"},
                "rows": results,
                "repeat": args.repeat,
                "runs": args.runs,
                "machine": machine(),
            },
        )
    return 0


def compare_variants(specs: list[str], error) -> list[tuple[str, dict]]:
    """--compare NAME:VAR=VALUE[,VAR=VALUE...] -> [("default", {}), (NAME, {VAR: VALUE, ...}), ...]."""
    out: list[tuple[str, dict]] = [("default", {})]
    for spec in specs:
        name, sep, assigns = spec.partition(":")
        pairs = [a.partition("=") for a in assigns.split(",") if a]
        if not sep or not name or not pairs or any(not k or not eq for k, eq, _ in pairs):
            error(
                f"--compare takes NAME:VAR=VALUE[,VAR=VALUE...], e.g. cap16:TVMGEN_OPENCL_MAX_PROGRAMS=16; not {spec!r}"
            )
        if name in [n for n, _ in out]:
            error(f"--compare: the name {name!r} is used twice")
        out.append((name, {k: v for k, _, v in pairs}))
    return out


def compare_cold_starts(args, work: Path, variants: list[tuple[str, dict]]) -> int:
    """Cold first runs of each GPU row under each variant's environment, interleaved: every round starts each
    row once under every variant, in an order rotated by the round, so a drift of the machine (shared, noisy)
    falls on all of them alike. Each start is logged as measured; the table gives medians and each variant's
    ratio to the default."""
    plan = _load_plan(work)
    runner = work / "runtime" / "bin" / "tvmgen-run"
    models = {m["name"]: m for m in plan["models"]}
    wanted = set(args.models.split(",")) if args.models else None
    rows = [
        r
        for r in plan["rows"]
        if r["device"] != "cpu" and "error" not in r and (wanted is None or r["model"] in wanted)
    ]
    if not rows:
        sys.exit(
            f"gpu.py: no GPU row of {work / PLAN} to compare" + (f" among --models {args.models}" if wanted else "")
        )
    starts: dict[tuple[str, str, str], list[dict]] = {}
    for rnd in range(args.rounds):
        for row in rows:
            k = rnd % len(variants)
            for name, extra in variants[k:] + variants[:k]:
                tmp = work / "run" / f"{Path(row['artifact']).name}--{name}"
                env, caches = _start_env(row, work, tmp)
                _fresh(tmp, *caches)
                try:
                    t = _start(
                        runner, work / row["artifact"], {**env, **extra}, _inputs(models[row["model"]], work), 0, 1, tmp
                    )
                except RuntimeError as e:  # e.g. a setting the runtime refuses: say which start, and why
                    sys.exit(f"gpu.py: {row['model']} {row['id']} under {name}: tvmgen-run failed: {e}")
                shutil.rmtree(tmp, ignore_errors=True)
                starts.setdefault((row["model"], row["id"], name), []).append(t)
                log(
                    f"round {rnd + 1}/{args.rounds} {row['model']} {row['id']} {name}: cold first run "
                    f"{t['first_run_ms']:.0f} ms"
                )
    body: list[list[str] | None] = []
    for row in rows:
        base = med([t["first_run_ms"] for t in starts[(row["model"], row["id"], "default")]])
        for name, extra in variants:
            ts = starts[(row["model"], row["id"], name)]
            xs = [t["first_run_ms"] for t in ts]
            here = med([(t.get("cache") or {}).get("source_builds") for t in ts])
            helpers = med([(t.get("cache") or {}).get("helper_builds") for t in ts])
            env_text = ",".join(f"{k}={v}" for k, v in extra.items()) or "-"
            ratio = "-" if name == "default" else benchlib.fmt_ratio(benchlib.ratio(med(xs), base))
            body.append(
                [
                    row["model"],
                    row["id"],
                    name,
                    env_text,
                    str(len(xs)),
                    fmt(med(xs)),
                    f"{fmt(min(xs))}-{fmt(max(xs))}",
                    ratio,
                    "-" if here is None else f"{here:g} / {helpers or 0:g}",
                ]
            )
        body.append(None)
    header = [
        "model",
        "device",
        "variant",
        "environment",
        "starts",
        "cold first run ms",
        "range",
        "x default",
        "programs built here / by helpers",
    ]
    print(
        f"GPU cold starts compared: {args.rounds} rounds, variants interleaved (each round in a rotated order); "
        "medians; cold: every cache emptied before each start"
    )
    print(benchlib.table(header, body[:-1], {4, 5, 6, 7, 8}))
    if args.json:
        benchlib.write_json(
            args.json,
            "gpu-compare",
            {
                "variants": dict(variants),
                "rounds": args.rounds,
                "starts": [{"model": m, "id": i, "variant": v, "runs": ts} for (m, i, v), ts in starts.items()],
                "machine": machine(),
            },
        )
    return 0
