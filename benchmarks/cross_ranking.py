#!/usr/bin/env python3
"""Which method ranks a cross build's schedule candidates as the target CPU would: qemu or a cost model?

A cross build's kernels (android, linux-aarch64) cannot be timed here, so a search for a better schedule
must rank its candidates another way. Two are at hand: time them under qemu-user, or ask MetaSchedule's
XGBoost cost model. Neither can be checked against a phone here, so this benchmark checks both on a target
whose truth this machine has: x86-64 with AVX2 and FMA (``mcpu=haswell``), run natively, stands for the
phone's CPU; qemu-x86_64 runs the same candidates as qemu-aarch64 would run an aarch64 build (the same
translator, with the guest's vector and floating-point instructions emulated).

For each of four kernels of the classes the slow-kernel guard flags (a 3x3 convolution, a 1x1 convolution
as a matrix product, a classifier head streaming its weights, a depthwise convolution; NHWC, float32, made
with TE, nothing downloaded), MetaSchedule draws ``--candidates`` schedules for the target (its CPU design
space, decisions sampled with a fixed seed) and every candidate is built and timed natively (the truth, one
thread, median of 5 measurements of at least 50 ms), then ranked by:

- its time under qemu-x86_64 (this script again, in a worker under the emulator);
- the cost model trained on the target's own measurements of other candidates of the same kernel (what a
  device that ran ``tvmgen tune`` once gives);
- the cost model trained on the target's own measurements of the *other* three kernels;
- the cost model trained on this kernel measured with another instruction set (``--other-mcpu``, default
  x86-64-v2: SSE, 4 lanes) — what a host can give for a phone it has never measured;
- the native timing again (how well the truth ranks itself: the noise floor).

The table gives each method's Kendall tau against the truth (1: the same order) and the true time of the
candidate it ranks first over the best candidate's ("pick": 1.00 is the best; a random pick's median is
given for scale). It also gives how much slower qemu runs the best candidate than the CPU does.

    .venv/bin/python benchmarks/cross_ranking.py                 # about 15 minutes on 2 cores, most of it qemu
    .venv/bin/python benchmarks/cross_ranking.py --no-qemu --candidates 8 --kernels head   # about a minute

Needs qemu-user (apt-get install qemu-user; Debian's scripts/bootstrap.sh installs it) and a CPU with AVX2
and FMA. The table goes to stdout, progress to stderr; ``--json FILE`` writes every number.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import numpy as np

TARGET_MCPU = "haswell"  # AVX2 + FMA: runs natively on any x86-64 of the last decade, the stand-in for a phone
REPEATS = 5
NATIVE_MIN_MS = 50
QEMU_MIN_MS = 20  # emulated candidates run thousands of times slower: one run is already longer than this


def kernels() -> dict:
    """name: (PrimFunc, argument shapes), made with TE."""
    from tvm import te

    def conv3x3(h: int, c: int, k: int):
        x = te.placeholder((1, h + 2, h + 2, c), name="x")
        w = te.placeholder((3, 3, c, k), name="w")
        rc, ry, rx = te.reduce_axis((0, c)), te.reduce_axis((0, 3)), te.reduce_axis((0, 3))
        y = te.compute(
            (1, h, h, k),
            lambda n, i, j, o: te.sum(x[n, i + ry, j + rx, rc] * w[ry, rx, rc, o], axis=[ry, rx, rc]),
            name="y",
        )
        return x, w, y

    def matmul(m: int, k: int, n: int):
        a, b = te.placeholder((m, k), name="a"), te.placeholder((k, n), name="b")
        r = te.reduce_axis((0, k))
        return a, b, te.compute((m, n), lambda i, j: te.sum(a[i, r] * b[r, j], axis=r), name="c")

    def depthwise(h: int, c: int):
        x = te.placeholder((1, h + 2, h + 2, c), name="x")
        w = te.placeholder((3, 3, c), name="w")
        ry, rx = te.reduce_axis((0, 3)), te.reduce_axis((0, 3))
        y = te.compute(
            (1, h, h, c), lambda n, i, j, o: te.sum(x[n, i + ry, j + rx, o] * w[ry, rx, o], axis=[ry, rx]), name="y"
        )
        return x, w, y

    made = {
        "conv3x3_14x14x64": conv3x3(14, 64, 64),
        "conv1x1_196x128x256": matmul(196, 128, 256),
        "head_8x120x2048": matmul(8, 120, 2048),
        "depthwise_28x28x64": depthwise(28, 64),
    }
    return {name: (te.create_prim_func(list(t)), [[int(d) for d in x.shape] for x in t]) for name, t in made.items()}


def target(mcpu: str):
    from tvm.target import Target

    return Target({"kind": "llvm", "mcpu": mcpu, "num-cores": 1})


def draw(func, tgt, n: int, seed: int):
    """``n`` candidates of MetaSchedule's CPU design space for ``tgt``, decisions drawn with ``seed``
    (deterministic): (the tuning context, the candidates)."""
    import tvm

    from tvmgen.compiler.targets.database import meta_schedule

    ms = meta_schedule()  # without the GPU intrinsics, which take about a minute to parse

    ctx = ms.TuneContext(
        mod=tvm.IRModule({"main": func}),
        target=tgt,
        space_generator="post-order-apply",
        search_strategy=ms.search_strategy.ReplayTrace(),
        task_name="kernel",
        num_threads=1,
        rand_state=seed,
    )
    ctx.pre_tuning(max_trials=n, num_trials_per_iter=n, design_spaces=ctx.generate_design_space())
    candidates = list(ctx.generate_measure_candidates() or [])
    ctx.post_tuning()
    return ctx, candidates


def build(candidates, tgt, directory: Path) -> list[str]:
    import tvm

    directory.mkdir(parents=True, exist_ok=True)
    paths = []
    for i, c in enumerate(candidates):
        path = str(directory / f"candidate{i:03d}.so")
        tvm.compile(c.sch.mod, target=tgt).export_library(path)
        paths.append(path)
    return paths


def time_all(paths: list[str], shapes: list, min_ms: int) -> list[float]:
    """Seconds per call of each built candidate: the median of REPEATS measurements of at least ``min_ms``."""
    import tvm

    dev = tvm.cpu()
    rng = np.random.default_rng(0)
    args = [tvm.runtime.tensor(rng.standard_normal(s).astype("float32"), dev) for s in shapes]
    out = []
    for path in paths:
        timer = tvm.runtime.load_module(path).time_evaluator(
            "main", dev, number=1, repeat=REPEATS, min_repeat_ms=min_ms
        )
        out.append(float(np.median(timer(*args).results)))
    return out


def time_under_qemu(paths: list[str], shapes: list, scratch: Path) -> list[float]:
    spec = scratch / "qemu-spec.json"
    spec.write_text(json.dumps({"paths": paths, "shapes": shapes}))
    r = subprocess.run(
        ["qemu-x86_64", sys.executable, __file__, "--worker", str(spec)],
        capture_output=True,
        text=True,
        env={**os.environ, "TVM_NUM_THREADS": "1"},
    )
    if r.returncode != 0:
        raise SystemExit(f"the worker under qemu-x86_64 failed:\n{r.stderr[-2000:]}")
    return json.loads(r.stdout.strip().splitlines()[-1])


def fit(pairs):
    """MetaSchedule's XGBoost cost model trained on (context, candidates, seconds) groups."""
    from tvmgen.compiler.targets.database import meta_schedule

    ms = meta_schedule()  # without the GPU intrinsics, which take about a minute to parse

    # below num_warmup_samples (default 100) data points XGBModel.predict returns random numbers
    model = ms.cost_model.XGBModel(num_tuning_cores=os.cpu_count() or 1, num_warmup_samples=0)
    for ctx, candidates, secs in pairs:
        model.update(ctx, candidates, [ms.runner.RunnerResult([s], None) for s in secs])
    return model


def scores(truth: np.ndarray, ranking) -> dict:
    """Kendall tau of ``ranking`` (lower: faster) against the true times, and the true time of its first
    candidate over the best's."""
    from scipy.stats import kendalltau

    ranking = np.asarray(ranking, dtype=float)
    return {
        "tau": float(kendalltau(truth, ranking)[0]),
        "pick": float(truth[int(np.argmin(ranking))] / truth.min()),
    }


def progress(msg: str) -> None:
    print(msg, file=sys.stderr, flush=True)


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--candidates", type=int, default=16, help="candidates ranked per kernel (default 16)")
    p.add_argument("--kernels", default="", help="comma-separated substrings of the kernels to run (default all)")
    p.add_argument("--other-mcpu", default="x86-64-v2", help="the other instruction set the transfer model learns on")
    p.add_argument("--no-qemu", action="store_true", help="leave out the qemu column (it takes most of the time)")
    p.add_argument("--json", type=Path, help="write every number to this file")
    p.add_argument("--worker", help=argparse.SUPPRESS)
    args = p.parse_args()
    if args.worker:
        spec = json.loads(Path(args.worker).read_text())
        print(json.dumps(time_all(spec["paths"], spec["shapes"], QEMU_MIN_MS)))
        return 0
    os.environ["TVM_NUM_THREADS"] = "1"  # candidates for one core, timed on one
    from tvmgen.compiler.targets.platforms import missing_cpu_features

    if missing_cpu_features({"kind": "llvm", "mcpu": TARGET_MCPU}):
        raise SystemExit(f"this CPU cannot run {TARGET_MCPU} code natively: the truth this benchmark needs")
    if not args.no_qemu and not shutil.which("qemu-x86_64"):
        raise SystemExit("qemu-x86_64 not found: apt-get install qemu-user (or pass --no-qemu)")
    wanted = [w for w in args.kernels.split(",") if w]
    chosen = {n: k for n, k in kernels().items() if not wanted or any(w in n for w in wanted)}
    n = args.candidates
    data: dict = {}
    with tempfile.TemporaryDirectory(prefix="cross-ranking-") as tmp:
        scratch = Path(tmp)
        for name, (func, shapes) in chosen.items():
            started = time.monotonic()
            ctx, ranked = draw(func, target(TARGET_MCPU), n, seed=1)
            ctx_same, same = draw(func, target(TARGET_MCPU), 2 * n, seed=2)
            ctx_other, other = draw(func, target(args.other_mcpu), 2 * n, seed=3)
            paths = build(ranked, target(TARGET_MCPU), scratch / name / "ranked")
            same_paths = build(same, target(TARGET_MCPU), scratch / name / "same")
            other_paths = build(other, target(args.other_mcpu), scratch / name / "other")
            progress(f"{name}: {len(ranked) + len(same) + len(other)} candidates built, timing natively")
            row = dict(
                ctx=ctx,
                ranked=ranked,
                truth=time_all(paths, shapes, NATIVE_MIN_MS),
                again=time_all(paths, shapes, NATIVE_MIN_MS),
                same=(ctx_same, same, time_all(same_paths, shapes, NATIVE_MIN_MS)),
                other=(ctx_other, other, time_all(other_paths, shapes, NATIVE_MIN_MS)),
            )
            if not args.no_qemu:
                progress(f"{name}: timing {len(ranked)} candidates under qemu-x86_64")
                row["qemu"] = time_under_qemu(paths, shapes, scratch)
            data[name] = row
            progress(f"{name}: {time.monotonic() - started:.0f} s")
    methods = ["native again", "qemu-x86_64", "model: same kernel", "model: other kernels", "model: other ISA"]
    table: dict = {}
    for name, row in data.items():
        truth = np.array(row["truth"])
        ranked = {
            "native again": row["again"],
            "model: same kernel": -fit([row["same"]]).predict(row["ctx"], row["ranked"]),
            "model: other kernels": -fit([r["same"] for m, r in data.items() if m != name]).predict(
                row["ctx"], row["ranked"]
            )
            if len(data) > 1
            else None,
            "model: other ISA": -fit([row["other"]]).predict(row["ctx"], row["ranked"]),
            "qemu-x86_64": row.get("qemu"),
        }
        table[name] = {
            "candidates": len(truth),
            "best_ms": float(truth.min() * 1e3),
            "spread": float(truth.max() / truth.min()),
            "random_pick": float(np.median(truth) / truth.min()),
            "qemu_slowdown": float(row["qemu"][int(np.argmin(truth))] / truth.min()) if "qemu" in row else None,
            **{m: scores(truth, r) for m, r in ranked.items() if r is not None},
        }
    header = "| kernel | best (native) | spread | random pick | " + " | ".join(methods) + " | qemu / native |"
    print(header)
    print("|" + "---|" * (header.count("|") - 1))
    for name, t in table.items():
        cells = [f"{t[m]['tau']:.2f} / {t[m]['pick']:.2f}x" if m in t else "-" for m in methods]
        slow = f"{t['qemu_slowdown']:.0f}x" if t["qemu_slowdown"] else "-"
        print(
            f"| {name} | {t['best_ms']:.3f} ms | {t['spread']:.1f}x | {t['random_pick']:.2f}x | "
            + " | ".join(cells)
            + f" | {slow} |"
        )
    print("\ncells: Kendall tau against the native times / the true time of the candidate ranked first over the best's")
    if args.json:
        args.json.write_text(json.dumps(table, indent=1))
    return 0


if __name__ == "__main__":
    sys.exit(main())
