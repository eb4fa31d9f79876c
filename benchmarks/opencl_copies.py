#!/usr/bin/env python3
"""OpenCL inputs: plain copies (clEnqueueWriteBuffer) against host-visible inputs (--host-visible-inputs).

The built-in model (tvmgen.builtin "builtin:mobilenet", 1x3x224x224) compiled with --device opencl
runs through tvmgen-run on the OpenCL platform found here (PoCL, a CPU OpenCL, on the development
machines), alternately in two kinds of process:

  plain          inputs are ordinary device buffers; SetInput is clEnqueueWriteBuffer (blocking)
  host-visible   inputs are allocated with memory scope "global.host" (CL_MEM_ALLOC_HOST_PTR);
                 SetInput maps the buffer (clEnqueueMapBuffer, blocking), memcpy, unmaps

Each process: --warmup untimed runs, then --repeat timed runs; its copy-in / run / copy-out medians.
The table shows the median over --rounds processes of each kind, and host-visible/plain.
Outputs are copied out the same way in both (only the inputs change). On PoCL (a CPU device,
memory already shared) the two are expected to be close; on a phone GPU with unified memory the
mapped path avoids the driver's staging copy.

    .venv/bin/python benchmarks/opencl_copies.py                    # 3 + 3 processes, 20 runs each
    .venv/bin/python benchmarks/opencl_copies.py --runtime PREFIX   # reuse a built runtime (bin/, lib/)
    .venv/bin/python benchmarks/opencl_copies.py --json out.json
"""

from __future__ import annotations

import argparse
import json
import os
import sys
from pathlib import Path

import benchlib
from benchlib import environment, log, table

KEYS = (
    ("copy-in", "copy_in_ms"),
    ("run (waits for the kernels)", "run_ms"),
    ("copy-out", "copy_out_ms"),
    ("total", "total_ms"),
)


def one(runner: Path, artifact: Path, work: Path, env: dict, args, host_visible: bool, tag: str) -> dict:
    t, _, _ = benchlib.tvmgen_run(
        runner, artifact, work, env, args.warmup, args.repeat, tag, ("--host-visible-inputs",) if host_visible else ()
    )
    if t.get("host_visible_inputs") is not host_visible:
        raise SystemExit(f"{tag}: the timings say host_visible_inputs={t.get('host_visible_inputs')}")
    return t


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--rounds", type=int, default=3, help="processes of each kind (alternating)")
    ap.add_argument("--repeat", type=int, default=20, help="timed runs per process")
    ap.add_argument("--warmup", type=int, default=2, help="untimed runs per process")
    ap.add_argument(
        "--runtime", type=Path, help="an installed runtime prefix (bin/tvmgen-run, lib/libtvmgen_opencl.so)"
    )
    ap.add_argument("--keep", type=Path, help="keep the artifact and kernel cache here")
    ap.add_argument("--json", type=Path, help="also write every number as JSON")
    args = ap.parse_args()

    work, runner = benchlib.opencl_setup(args.runtime, args.keep, "opencl-copies-bench-", log)
    from tvmgen import frontends
    from tvmgen.compiler.build import BuildOptions, compile_to_artifact
    from tvmgen.compiler.targets.platforms import PLATFORMS
    from tvmgen.frontends.builtin import materialize

    art = work / "mobilenet-opencl"
    if not (art / "manifest.json").is_file():
        log("compiling builtin:mobilenet for opencl ...")
        imported = frontends.load(materialize("builtin:mobilenet", work), [])
        compile_to_artifact(imported, BuildOptions(PLATFORMS["host"], "opencl"), art, True, {"name": "mobilenet"})

    env = dict(os.environ, TVMGEN_OPENCL_CACHE_DIR=str(work / "cache"), POCL_KERNEL_CACHE="0")
    log("filling the kernel cache ...")
    one(runner, art, work, env, argparse.Namespace(warmup=0, repeat=1), False, "fill")
    plain, mapped = [], []
    for r in range(args.rounds):
        log(f"round {r + 1}/{args.rounds}: plain, host-visible ...")
        plain.append(one(runner, art, work, env, args, False, f"plain{r}"))
        mapped.append(one(runner, art, work, env, args, True, f"mapped{r}"))

    def med(rows, key):
        return benchlib.median(r[key]["median"] for r in rows)

    body = []
    for name, key in KEYS:
        p, m = med(plain, key), med(mapped, key)
        body.append(
            [
                name,
                benchlib.fmt_num(p, large=10, digits=3),
                benchlib.fmt_num(m, large=10, digits=3),
                benchlib.fmt_ratio(m / p if p >= 0.001 else None),
            ]
        )
    print(
        f"OpenCL inputs, builtin:mobilenet: median over {args.rounds} processes of each one's median of "
        f"{args.repeat} runs (ms)"
    )
    print(table(["stage", "plain copies", "host-visible inputs", "host-visible/plain"], body, {1, 2, 3}))
    if args.json:
        args.json.write_text(
            json.dumps(
                {"environment": environment(("apache-tvm", "apache-tvm-ffi")), "plain": plain, "host_visible": mapped},
                indent=2,
            )
        )
    return 0


if __name__ == "__main__":
    sys.exit(main())
