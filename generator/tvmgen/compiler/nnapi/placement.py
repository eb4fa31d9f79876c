"""Where each operator runs: TVM's NNAPI patterns, or the cost strategy's search over a cost table."""

from __future__ import annotations

import json
from dataclasses import asdict
from pathlib import Path

from tvmgen.compiler.nnapi.report import Op, Report, analyse, prepare
from tvmgen.core.errors import InputError

# Static costs (the NNAPI RFC's approach for users without a phone at hand). Rates in GFLOP/s; a
# transition hands a tensor between TVM and an NNAPI execution: a fixed cost plus a per-MB copy.
DEFAULT_COSTS = {
    "nnapi_gflops": {"conv2d": 40.0, "batch_matmul": 30.0, "default": 8.0},
    "tvm_gflops": {"conv2d": 4.0, "batch_matmul": 4.0, "default": 2.0},
    "transition_ms": 0.25,
    "transition_ms_per_mb": 0.5,
}


# Rates are looked up by Relax op kind (conv2d, add, ...); a batched matmul is the table's batch_matmul.
_RATE_ALIASES = {"matmul": "batch_matmul"}


def rate_gflops(kind: str, rates: dict) -> float:
    return float(rates.get(kind) or rates.get(_RATE_ALIASES.get(kind, ""), 0) or rates["default"])


def op_cost_ms(op: Op, side: str, costs: dict) -> float:
    rates = costs["nnapi_gflops" if side == "nnapi" else "tvm_gflops"]
    parts = op.kind_flops or {op.name: op.flops}
    return sum(f / (rate_gflops(kind, rates) * 1e9) for kind, f in parts.items()) * 1e3


def transition_ms(nbytes: int, costs: dict) -> float:
    return costs["transition_ms"] + costs["transition_ms_per_mb"] * nbytes / 1e6


def cost_strategy(patterns: Report, costs: dict) -> Report:
    """Dynamic programming over the ops in execution order: each NNAPI-capable op on NNAPI or TVM,
    paying a transition whenever consecutive ops change sides (the model starts and ends on TVM)."""
    ops = patterns.ops
    inf = float("inf")
    # best[i][s]: cheapest cost of ops[:i+1] with op i on side s; s: 0 tvm, 1 nnapi
    best = [[inf, inf] for _ in ops]
    back = [[0, 0] for _ in ops]
    for i, op in enumerate(ops):
        in_bytes = ops[i - 1].out_bytes if i else op.out_bytes
        for s in (0, 1):
            if s == 1 and op.side != "nnapi":
                continue  # only what a pattern matched can go to NNAPI
            own = op_cost_ms(op, "nnapi" if s else "tvm", costs)
            if i == 0:
                best[i][s] = own + (transition_ms(in_bytes, costs) if s else 0.0)
                continue
            for prev in (0, 1):
                c = best[i - 1][prev] + own + (transition_ms(in_bytes, costs) if prev != s else 0.0)
                if c < best[i][s]:
                    best[i][s], back[i][s] = c, prev
    if not ops:
        return Report("cost", patterns.feature_level, [])
    last = len(ops) - 1
    end = [best[last][0], best[last][1] + transition_ms(ops[last].out_bytes, costs)]
    side = 0 if end[0] <= end[1] else 1
    chosen = [0] * len(ops)
    for i in range(last, -1, -1):
        chosen[i] = side
        side = back[i][side]
    new_ops, partition, prev = [], -1, 0
    for op, s in zip(ops, chosen):
        o = Op(**asdict(op))
        if s:
            partition += 0 if prev else 1
            o.side, o.partition = "nnapi", partition
        else:
            if op.side == "nnapi":
                o.blocked_because = "kept on TVM: its transitions cost more than NNAPI saves"
            o.side, o.partition = "tvm", None
        prev = s
        new_ops.append(o)
    return Report("cost", patterns.feature_level, new_ops)


def load_costs(path: Path | None) -> dict:
    costs = json.loads(json.dumps(DEFAULT_COSTS))
    if path is None:
        return costs
    try:
        user = json.loads(Path(path).read_text())
    except (OSError, json.JSONDecodeError) as e:
        raise InputError(
            f"cannot read the cost table {path}: {e}", "give a JSON object like: " + json.dumps(DEFAULT_COSTS)
        ) from e
    for k, v in user.items():
        if k not in DEFAULT_COSTS:
            raise InputError(f"unknown key {k!r} in the cost table {path}", f"keys: {', '.join(DEFAULT_COSTS)}")
        costs[k] = {**costs[k], **v} if isinstance(costs[k], dict) else float(v)
    return costs


def partition(
    mod,
    params: list,
    n_inputs: int,
    feature_level: int | None = None,
    strategy: str = "patterns",
    costs: dict | None = None,
) -> tuple[object, Report]:
    """Bind the weights, prepare, partition; returns the partitioned module and its report."""
    from tvm import relax
    from tvm.relax.backend.contrib.nnapi import partition_for_nnapi

    if params:
        mod = relax.transform.BindParams("main", dict(zip(mod["main"].params[n_inputs:], params)))(mod)
    partitioned = partition_for_nnapi(prepare(mod), feature_level=feature_level)
    report = analyse(partitioned, "patterns", feature_level)
    if strategy == "cost":
        report = cost_strategy(report, costs or DEFAULT_COSTS)
    return partitioned, report
