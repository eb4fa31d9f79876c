"""The slow-kernel guard: kernels whose measured speed says a schedule did not fit them.

A kernel is flagged when it takes a real share of the run and its GFLOP/s is

- below ``1 / RATIO`` of what the fastest kernel of its kind reaches in the same model (a
  convolution at 7.9 GFLOP/s beside convolutions at 150: issue 37's 1-D convolution left out of
  the NHWC schedules by a layout fallback, or a GELU epilogue computed by a libm call per element);
  a convolution or matmul with no other of its kind is held to the fastest compute-bound kernel of
  the other of the two (both are register-tiled products: a CTC recognizer's one classifier matmul
  at 7 GFLOP/s, scalar code, beside its convolutions at 200),
- or below its kind's floor (``FLOORS``: rates no vectorised kernel of that kind falls to, even on
  a phone's small core at one thread).

Measured times are noisy (a shared machine, a phone's governor), so the guard reads each kernel's
median over the profiled runs where the profile has it (``median_ms``; else its mean), flags only
kernels of at least ``MIN_MS`` per run (a tiny kernel's rate is mostly call overhead), and leaves
a wide margin (8x). Only the compute kinds are compared: elementwise and layout kernels differ in
arithmetic per byte by far more than 8x between an ``add`` and a polynomial, so their GFLOP/s say
nothing about their schedule. For the same reason a kernel that does fewer than
``MEMORY_BOUND_FLOPS_PER_BYTE`` FLOPs per byte of its weights (a matrix-vector product: 0.5, its
speed the memory's) is held only to the floor, not to its kind's best.

Where the profile was taken here, the machine's own peaks (``machine_peaks``, measured in the same process)
are a second yardstick, so a model whose every product is slow is seen too: a compute-bound convolution or
matmul below ``1 / PEAK_RATIO`` of what tvmgen's probe product reaches with the same threads (reason
"peak"), and a memory-bound one streaming its weights below ``1 / PEAK_RATIO`` of one core's read bandwidth
(reason "bandwidth").
"""

from __future__ import annotations

from dataclasses import dataclass

RATIO = 8.0
PEAK_RATIO = 8.0  # below the machine's measured peak (machine_peaks) by more than this: slow
MIN_MS = 0.05
MIN_SHARE = 0.02
# GFLOP/s no scheduled kernel of the kind falls below (a scalar loop of libm calls runs at ~0.3).
FLOORS = {"conv2d": 2.0, "matmul": 1.0, "depthwise": 0.5, "recurrent": 0.5}
COMPARED = tuple(FLOORS)
GEMM_LIKE = ("conv2d", "matmul")  # tiled the same way: each reaches what the other does
MEMORY_BOUND_FLOPS_PER_BYTE = 2.0
# Relax operators that TVM lowers to a libm call per element unless tvmgen writes them out
TRANSCENDENTAL = ("erf", "exp", "tanh", "log", "pow", "power", "sqrt", "rsqrt", "sigmoid", "sin", "cos", "gelu")


@dataclass
class SlowKernel:
    name: str
    kind: str
    ops: list
    ms: float  # per run: the median over the profiled runs where known
    gflops: float
    kind_best: float | None  # the fastest kernel of the same kind in the model (None: it is the only one)
    kind_best_name: str | None
    reason: str  # "ratio" (far below its kind's best) or "floor"
    cause: str
    kind_best_kind: str | None = None  # the compared kernel's kind, when another (GEMM_LIKE)
    peak: float | None = None  # reason "peak": the machine's GFLOP/s; "bandwidth": its read GB/s
    gbs: float | None = None  # reason "bandwidth": the kernel's GB/s of weights
    calls: int = 1  # calls per run (``ms`` is all of them)
    peak_of: str = "this machine's probe product reaches"  # reason "peak": where ``peak`` was measured

    def line(self) -> str:
        """One line for the user: the kernel, its rate, what its kind reaches, why and what to do."""
        rate = f"{self.gflops:.1f} GFLOP/s, {self.ms:.3f} ms per run"
        return f"slow kernel {self.name}: {rate}, {self._versus()}. {self.cause}"

    def _versus(self) -> str:
        """What the kernel fell short of."""
        if self.reason == "peak" and self.peak:
            return (
                f"{self.peak / self.gflops:.0f}x below the {self.peak:.1f} GFLOP/s {self.peak_of} with the same threads"
            )
        if self.reason == "bandwidth" and self.peak and self.gbs:
            return (
                f"its weights read at {self.gbs:.1f} GB/s, {self.peak / self.gbs:.0f}x below this machine's "
                f"{self.peak:.1f} GB/s (one core)"
            )
        if self.kind_best is not None:
            which = (
                f"same kind, {self.kind}"
                if self.kind_best_kind in (None, self.kind)
                else f"a {self.kind_best_kind}: no other {self.kind} here, and convolutions and matmuls are tiled alike"
            )
            versus = (
                f"{self.kind_best / self.gflops:.0f}x below the {self.kind_best:.1f} GFLOP/s of "
                f"{self.kind_best_name} ({which})"
            )
        else:
            versus = f"below the {FLOORS[self.kind]:g} GFLOP/s floor for a {self.kind} kernel"
        if self.reason == "floor" and self.kind_best is not None:
            versus += f"; below the {FLOORS[self.kind]:g} GFLOP/s floor"
        return versus

    def to_json(self) -> dict:
        return {
            "name": self.name,
            "kind": self.kind,
            "ms": self.ms,
            "gflops": self.gflops,
            "kind_best_gflops": self.kind_best,
            "kind_best": self.kind_best_name,
            "kind_best_kind": self.kind_best_kind or self.kind if self.kind_best_name else None,
            "reason": self.reason,
            "cause": self.cause,
            **({"peak": self.peak} if self.peak else {}),
            **({"gbs": self.gbs} if self.gbs else {}),
        }


def robust_rate(row: dict) -> tuple[float, float | None]:
    """(ms per run, GFLOP/s) of a profile row from its median time when the profile has one."""
    ms = row.get("median_ms") or row["total_ms"]
    if not row.get("flops") or ms <= 0:
        return ms, None
    return ms, row["flops"] * row["calls"] / (ms / 1e3) / 1e9


def find(
    rows: list[dict], whole_run_ms: float, ratio: float = RATIO, min_ms: float = MIN_MS, peaks=None
) -> list[SlowKernel]:
    """The slow kernels among a profile's rows (``Profile.rows``), slowest first; ``peaks``: the machine's
    (``machine_peaks.Peaks``) where the profile was taken here."""
    rated = []
    for r in rows:
        if r["kind"] not in COMPARED:
            continue
        ms, gflops = robust_rate(r)
        if gflops:
            rated.append((r, ms, gflops))
    out = []
    for r, ms, gflops in rated:
        if ms < min_ms or (whole_run_ms and ms < MIN_SHARE * whole_run_ms):
            continue
        others = [(g, o["name"], o["kind"]) for o, _, g in rated if o is not r and o["kind"] == r["kind"]]
        if not others and r["kind"] in GEMM_LIKE:
            others = [
                (g, o["name"], o["kind"])
                for o, _, g in rated
                if o["kind"] in GEMM_LIKE and o["kind"] != r["kind"] and not _memory_bound(o)
            ]
        best, best_name, best_kind = max(others) if others else (None, None, None)
        memory_bound = _memory_bound(r)
        gbs = r["weight_bytes"] / (ms / 1e3) / 1e9 if memory_bound else None
        peak = None
        if best is not None and gflops * ratio < best and not memory_bound:
            reason = "ratio"
        elif gflops < FLOORS[r["kind"]]:
            reason = "floor"
        elif peaks and r["kind"] in GEMM_LIKE and not memory_bound and gflops * PEAK_RATIO < peaks.gflops:
            reason, peak = "peak", peaks.gflops
        elif peaks and gbs is not None and gbs * PEAK_RATIO < peaks.read_gbs:
            reason, peak = "bandwidth", peaks.read_gbs
        else:
            continue
        out.append(
            SlowKernel(
                r["name"],
                r["kind"],
                list(r["ops"]),
                ms,
                gflops,
                best,
                best_name,
                reason,
                cause(r),
                best_kind,
                peak,
                gbs,
                int(r.get("calls") or 1),
                f"tvmgen's probe product reaches on device {peaks.device!r}"
                if peaks is not None and peaks.device
                else "this machine's probe product reaches",
            )
        )
    return sorted(out, key=lambda k: -k.ms)


def _memory_bound(row: dict) -> bool:
    """Fewer FLOPs than MEMORY_BOUND_FLOPS_PER_BYTE per byte of its weights: its speed is the memory's."""
    return bool(row.get("weight_bytes")) and row["flops"] < MEMORY_BOUND_FLOPS_PER_BYTE * row["weight_bytes"]


def cause(row: dict) -> str:
    """The likely cause of a slow kernel and what to do, from its operators and kind."""
    ops = [o.lower() for o in row.get("ops") or []]
    libm = [o for o in ops if o in TRANSCENDENTAL]
    tail = "If it is not that, report it with `tvmgen run ARTIFACT --profile --json` (docs/troubleshooting.md)."
    if libm:
        return (
            f"Likely: its {', '.join(dict.fromkeys(libm))} computed by a libm call per element, which no loop "
            "vectorises (tvmgen writes exp, erf, tanh and sigmoid out for float32 CPU builds; other types and "
            "operators keep TVM's lowering). " + tail
        )
    if row["kind"] == "conv2d":
        return (
            "Likely: the convolution was left out of tvmgen's NHWC schedules (the compile output says "
            "'built with tvmgen's CPU pipeline without the NHWC layout conversion' and prints a 'cost:' line) "
            "or no schedule rule fits its shape (the compile summary names unscheduled kernels). " + tail
        )
    if row["kind"] == "matmul":
        return (
            "Likely: no schedule rule fits the product's shape (the compile summary names unscheduled kernels), "
            "or its operands are not constants that can be packed (--separate-params, weights computed at run "
            "time). " + tail
        )
    return "Likely: no schedule rule fits it (the compile summary names unscheduled kernels). " + tail
