#!/usr/bin/env python3
"""OpenCL kernel cache of libtvmgen_opencl: cold start (empty cache) against warm start (cache filled).

The built-in model (tvmgen.frontends.builtin "builtin:mobilenet", 1x3x224x224, MobileNet v1 style) compiled
with --device opencl (--gpu-family generic) runs through the C++ runner tvmgen-run on the OpenCL
platform found here (PoCL, a CPU OpenCL, on the development machines). Every start is a fresh
process:

  cold   the kernel cache directory is emptied first: every kernel is compiled from source by the
         driver (clBuildProgram) and its binary stored
  warm   the directory filled by the cold runs: every kernel comes from its stored binary

For each start: the process wall time, tvmgen-run's own load / init / first-run timers (kernels are
built lazily, on their first launch: the compile cost lands in "first run"), and the cache's own
counters (TVMGEN_OPENCL_LOG=1: hits, misses, driver build time, cached-binary load time).
Then copy-in / run / copy-out medians over --repeat runs of a warm process: "run" includes waiting
for the kernels (the runtime syncs the device after each run), "copy-out" is only the copy.
The same model compiled for the CPU (LLVM) runs once for context.

PoCL keeps its own cache of the machine code it generates per kernel and work-group size at the
first launch (a PoCL "binary" is LLVM bitcode, so a cache hit here still leaves that step): it is
off (POCL_KERNEL_CACHE=0) unless --pocl-cache is given; then it lives under the work directory
(POCL_CACHE_DIR) and is emptied before each cold start too. On phone GPU drivers the program
binary is the final device code, so a hit skips the whole compilation.

    .venv/bin/python benchmarks/opencl_cache.py                    # 3 cold + 3 warm starts (~3 min on 2 cores)
    .venv/bin/python benchmarks/opencl_cache.py --quick            # 1 + 1 (~1.5 min)
    .venv/bin/python benchmarks/opencl_cache.py --runtime PREFIX   # reuse a built runtime (bin/, lib/)
    .venv/bin/python benchmarks/opencl_cache.py --json out.json

The table goes to stdout; progress goes to stderr.
"""

from __future__ import annotations

import argparse
import json
import os
import re
import shutil
import sys
from pathlib import Path

import benchlib
from benchlib import environment, log, table

STATS = re.compile(r"tvmgen-opencl: cache (\{.*\})")


def start(runner: Path, artifact: Path, work: Path, env: dict, repeat: int, tag: str) -> dict:
    """One tvmgen-run process; its timings, cache counters and wall time."""
    t, stderr, wall = benchlib.tvmgen_run(runner, artifact, work, env, 0, repeat, tag)
    m = STATS.search(stderr)
    t["cache"] = json.loads(m.group(1)) if m else None
    t["wall_ms"] = wall
    # with --warmup 0 the first timed run is the process's first: its copy-out waits for its kernels
    if repeat == 1:
        t["first_output_ms"] = (
            t["load_ms"] + t["init_ms"] + t["copy_in_ms"]["median"] + t["first_run_ms"] + t["copy_out_ms"]["median"]
        )
    return t


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--rounds", type=int, default=3, help="cold starts and warm starts (each)")
    ap.add_argument("--repeat", type=int, default=10, help="timed runs in the copy-in/run/copy-out process")
    ap.add_argument("--quick", action="store_true", help="1 cold + 1 warm start, 3 timed runs")
    ap.add_argument(
        "--runtime", type=Path, help="an installed runtime prefix (bin/tvmgen-run, lib/libtvmgen_opencl.so)"
    )
    ap.add_argument("--pocl-cache", action="store_true", help="leave PoCL's own kernel cache on")
    ap.add_argument("--keep", type=Path, help="keep artifacts and caches here")
    ap.add_argument("--json", type=Path, help="also write every number as JSON")
    args = ap.parse_args()
    if args.quick:
        args.rounds, args.repeat = 1, 3

    work, runner = benchlib.opencl_setup(args.runtime, args.keep, "opencl-cache-bench-", log)
    from tvmgen import frontends
    from tvmgen.compiler.build import BuildOptions, compile_to_artifact
    from tvmgen.compiler.targets.platforms import PLATFORMS
    from tvmgen.frontends.builtin import materialize

    log("compiling builtin:mobilenet for opencl and cpu ...")
    imported = frontends.load(materialize("builtin:mobilenet", work), [])
    arts = {}
    for device in ("opencl", "cpu"):
        arts[device] = work / f"mobilenet-{device}"
        if not (arts[device] / "manifest.json").is_file():
            compile_to_artifact(
                imported, BuildOptions(PLATFORMS["host"], device), arts[device], True, {"name": "mobilenet"}
            )

    cache = work / "cache"
    env = dict(os.environ, TVMGEN_OPENCL_CACHE_DIR=str(cache), TVMGEN_OPENCL_LOG="1")
    pocl_cache = work / "pocl-cache"
    if args.pocl_cache:
        env["POCL_CACHE_DIR"] = str(pocl_cache)
    else:
        env["POCL_KERNEL_CACHE"] = "0"

    cold, warm = [], []
    for r in range(args.rounds):
        shutil.rmtree(cache, ignore_errors=True)
        shutil.rmtree(pocl_cache, ignore_errors=True)
        log(f"cold start {r + 1}/{args.rounds} ...")
        cold.append(start(runner, arts["opencl"], work, env, 1, f"cold{r}"))
    for r in range(args.rounds):
        log(f"warm start {r + 1}/{args.rounds} ...")
        warm.append(start(runner, arts["opencl"], work, env, 1, f"warm{r}"))
    pocl_only = []
    if args.pocl_cache:  # PoCL's cache alone (filled by the runs above), tvmgen's cache off
        for r in range(args.rounds):
            log(f"warm start, PoCL's cache only {r + 1}/{args.rounds} ...")
            pocl_only.append(start(runner, arts["opencl"], work, dict(env, TVMGEN_OPENCL_CACHE_DIR=""), 1, f"pocl{r}"))
    log(f"steady state: {args.repeat} runs in a warm process ...")
    steady = start(runner, arts["opencl"], work, env, args.repeat, "steady")
    log("cpu artifact for context ...")
    cpu = start(runner, arts["cpu"], work, env, args.repeat, "cpu")

    def med(rows, key):
        return benchlib.median(r[key] for r in rows)

    def cmed(rows, key):
        return benchlib.median(r["cache"][key] for r in rows)

    def fmt(x):
        return benchlib.fmt_num(x, large=10, digits=3)

    def ratio(a, b):  # "-" where one side is (nearly) nothing: no meaningful ratio
        return benchlib.fmt_ratio(a / b if min(a, b) >= 0.01 else None, digits=1)

    startup = [
        ("process wall time", med(cold, "wall_ms"), med(warm, "wall_ms")),
        ("load (manifest, library)", med(cold, "load_ms"), med(warm, "load_ms")),
        ("init (VM, buffers, weights)", med(cold, "init_ms"), med(warm, "init_ms")),
        ("first run (kernel builds)", med(cold, "first_run_ms"), med(warm, "first_run_ms")),
        ("first output (load to copy-out)", med(cold, "first_output_ms"), med(warm, "first_output_ms")),
        ("  cache: driver compile", cmed(cold, "build_ms"), cmed(warm, "build_ms")),
        ("  cache: binary load", cmed(cold, "load_ms"), cmed(warm, "load_ms")),
    ]
    body = [[name, fmt(c), fmt(w), ratio(c, w)] for name, c, w in startup]
    header = ["stage", "cold (empty cache)", "warm (cache)", "cold/warm"]
    if pocl_only:
        header.append("PoCL cache only")
        extra = [
            med(pocl_only, "wall_ms"),
            med(pocl_only, "load_ms"),
            med(pocl_only, "init_ms"),
            med(pocl_only, "first_run_ms"),
            med(pocl_only, "first_output_ms"),
            cmed(pocl_only, "build_ms"),
            cmed(pocl_only, "load_ms"),
        ]
        for row, x in zip(body, extra):
            row.append(fmt(x))
    counts = (
        f"kernels: cold {cold[0]['cache']['misses']} misses / {cold[0]['cache']['writes']} written, "
        f"warm {warm[0]['cache']['hits']} hits / {warm[0]['cache']['misses']} misses"
    )
    print(
        f"OpenCL kernel cache, builtin:mobilenet (median of {args.rounds} starts each, ms; "
        f"PoCL's own cache {'on' if args.pocl_cache else 'off'})"
    )
    print(table(header, body, {1, 2, 3, 4}))
    print(counts)
    print()
    stage_rows = []
    for name, key in (
        ("copy-in", "copy_in_ms"),
        ("run (waits for the kernels)", "run_ms"),
        ("copy-out", "copy_out_ms"),
        ("total", "total_ms"),
    ):
        o, c = steady[key]["median"], cpu[key]["median"]
        stage_rows.append([name, fmt(o), fmt(c), ratio(o, c) if key in ("copy_in_ms", "total_ms") else "-"])
    print(f"Steady state, median of {args.repeat} runs in one warm process (ms): OpenCL against the CPU artifact")
    print(table(["stage", "opencl", "cpu (llvm)", "opencl/cpu"], stage_rows, {1, 2, 3}))
    if args.json:
        args.json.write_text(
            json.dumps(
                {
                    "environment": environment(("apache-tvm", "apache-tvm-ffi")),
                    "pocl_kernel_cache": args.pocl_cache,
                    "cold": cold,
                    "warm": warm,
                    "pocl_cache_only": pocl_only,
                    "steady": steady,
                    "cpu": cpu,
                },
                indent=2,
            )
        )
    return 0


if __name__ == "__main__":
    sys.exit(main())
