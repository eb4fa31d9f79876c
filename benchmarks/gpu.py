#!/usr/bin/env python3
"""GPU benchmark: cold / warm first run, steady run, copies and output error per model, device, precision.

Every artifact runs through the C++ runner tvmgen-run, each start a fresh process:

  cold first run   the first inference of a process whose OpenCL kernel cache (TVMGEN_OPENCL_CACHE_DIR),
                   Vulkan pipeline cache (TVMGEN_VULKAN_CACHE_DIR) and driver caches (PoCL's POCL_CACHE_DIR,
                   NVIDIA's CUDA_CACHE_PATH and __GL_SHADER_DISK_CACHE_PATH, Mesa's MESA_SHADER_CACHE_DIR)
                   are empty: the kernels' programs (Vulkan: pipelines) start building when the model loads
                   and the first run waits for what is left, so most of their compile lands here
                   (tvmgen-run --prepare would move OpenCL's out)
  warm first run   the same, with the caches the cold start filled
  init             VM initialisation with OpenCL context / CUDA context creation (median of all starts)
  kernels          programs (up to 8 kernels each) built from source in a cold start (by this process or its
                   helper processes, TVMGEN_OPENCL_BUILD_PROCESSES) / loaded from tvmgen's cache in a warm
                   one; Vulkan: pipelines created without / with tvmgen's pipeline cache
  steady           median of --runs timed runs (after one warm-up) in one warm process; "run" waits for
                   the kernels; copy-in / copy-out are the host<->device copies (medians)
  max abs err      against the CPU (LLVM) build of the same model, on one fixed random input (seed 0)

Rows: each model x device (cpu for reference; opencl, the generic GPU family, always; opencl-adreno
with --gpu-family adreno and/or desktop; cuda with --cuda; vulkan with --vulkan) x precision (fp32; fp16 too with --precision fp16). A row
whose build or run fails says why and the benchmark goes on.

Two phases, since the GPU machine has no TVM Python package (python3 + numpy only):

    # here (TVM): compile everything, the CPU reference outputs and a self-contained runtime
    .venv/bin/python benchmarks/gpu.py --build-only --work gpuwork [--zoo [--models a,b]] [--cuda] ...
    # on the GPU machine (python3 + numpy): run all that the work directory holds, print the table
    python3 benchmarks/gpu.py --run-only --work gpuwork [--repeat 3] [--runs 20] [--json out.json]
    # both, here (PoCL)
    .venv/bin/python benchmarks/gpu.py [--quick]
    # a runtime setting against the default: cold first runs interleaved over rounds (GPU machine)
    python3 benchmarks/gpu.py --run-only --work gpuwork --compare cap16:TVMGEN_OPENCL_MAX_PROGRAMS=16 --rounds 6

The --run-only path imports neither tvm nor tvmgen. The OpenCL library comes from the environment
(TVMGEN_OPENCL_LIBRARY, OCL_ICD_VENDORS ... are passed through). TVM 0.27 keeps CUDA kernels as source
in the library and compiles them when it is loaded, through a Python hook; for the C++ runner the build
phase compiles them here with nvcc (--cuda-arch) and carries a small library that serves them
(runtime/lib/libtvmgen_cuda_kernels.so, preloaded for cuda rows).
"""

from __future__ import annotations

import argparse
import re
import shutil
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))

import benchlib
from gpu_build import build_all
from gpu_run import compare_cold_starts, compare_variants, run_all, variants
from gpu_table import COLUMNS, report

# what the tests call, reached through this module whichever part defines it
__all__ = ["COLUMNS", "main", "report", "variants"]


# =========================================================================== main


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument(
        "--zoo", action="store_true", help="the zoo's models (benchmarks/zoo.py) instead of builtin:mobilenet"
    )
    ap.add_argument("--models", help="with --zoo: comma-separated subset (with --compare: the rows of these models)")
    ap.add_argument(
        "--model",
        default="builtin:mobilenet",
        help="without --zoo: the built-in model to measure (builtin:mobilenet, or builtin:tiny for a quick check)",
    )
    ap.add_argument(
        "--gpu-family",
        default="generic",
        help="comma-separated: adreno and/or desktop add opencl rows compiled with that --gpu-family",
    )
    ap.add_argument("--precision", default="fp32", help="fp16: add rows compiled with --precision fp16")
    ap.add_argument("--cuda", action="store_true", help="add cuda rows (nvcc compiles the kernels here)")
    ap.add_argument("--cuda-arch", default="sm_90", help="with --cuda: the GPU architecture [sm_90: H100/H200]")
    ap.add_argument("--vulkan", action="store_true", help="add vulkan rows (tvmgen's GLSL/SPIR-V kernels)")
    ap.add_argument("--no-cpu", action="store_true", help="no cpu rows (the CPU build is still the reference)")
    ap.add_argument("--repeat", type=int, default=3, help="cold starts and warm starts, each [3]")
    ap.add_argument("--runs", type=int, default=20, help="timed runs of the steady process [20]")
    ap.add_argument("--quick", action="store_true", help="builtin model, 1 start each, 1 timed run")
    ap.add_argument("--work", type=Path, help="work directory (kept; reused by later builds)")
    ap.add_argument("--runtime", help="an installed runtime prefix (bin/tvmgen-run, lib/) instead of building one")
    ap.add_argument(
        "--compare",
        action="append",
        default=[],
        metavar="NAME:VAR=VALUE[,...]",
        help="with --run-only: instead of the table, compare the GPU rows' cold first runs under this environment "
        "against the default, interleaved over --rounds (repeatable; e.g. cap16:TVMGEN_OPENCL_MAX_PROGRAMS=16)",
    )
    ap.add_argument("--rounds", type=int, default=5, help="with --compare: cold starts of each row and variant [5]")
    phase = ap.add_mutually_exclusive_group()
    phase.add_argument("--build-only", action="store_true", help="compile into --work (needs TVM)")
    phase.add_argument("--run-only", action="store_true", help="run what --work holds (python3 + numpy only)")
    benchlib.json_option(ap)
    args = ap.parse_args()
    if args.quick:
        args.zoo, args.repeat, args.runs = False, 1, 1
    if not args.model.startswith("builtin:"):
        ap.error(
            f"--model takes a built-in model (builtin:mobilenet, builtin:tiny), not {args.model}; --zoo for others"
        )
    if (args.build_only or args.run_only) and not args.work:
        ap.error("--build-only and --run-only need --work DIR")
    if args.compare and not args.run_only:
        ap.error("--compare runs what a work directory holds: add --run-only --work DIR")
    if args.rounds < 1 or args.repeat < 1:
        ap.error("--rounds and --repeat must be at least 1 (the outputs checked are the last warm start's)")
    variants = compare_variants(args.compare, ap.error)
    if args.cuda and not re.fullmatch(r"sm_\d+[a-z]?", args.cuda_arch):
        ap.error("--cuda-arch takes sm_XX, e.g. sm_90")
    import tempfile

    work = (args.work or Path(tempfile.mkdtemp(prefix="tvmgen-gpu-bench-"))).absolute()
    work.mkdir(parents=True, exist_ok=True)
    if not args.run_only:
        build_all(args, work)
    if args.build_only:
        return 0
    if args.compare:
        return compare_cold_starts(args, work, variants)
    try:
        return run_all(args, work)
    finally:
        if args.work is None:
            shutil.rmtree(work, ignore_errors=True)


if __name__ == "__main__":
    sys.exit(main())
