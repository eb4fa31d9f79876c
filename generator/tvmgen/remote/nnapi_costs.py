"""The TVM side of NNAPI's cost table, measured on a device over RPC: each operator kind the NNAPI
partitions hold, compiled alone for the device's CPU and timed there (`tvmgen partition --measure`)."""

from __future__ import annotations

from pathlib import Path

import numpy as np

from tvmgen.compiler.nnapi.costs import op_instances, single_op_model
from tvmgen.compiler.nnapi.placement import rate_gflops
from tvmgen.core.log import step
from tvmgen.remote import bench


def measure_tvm_costs(
    partitioned, target, platform: str | None, costs: dict, scratch: Path, repeat: int = 5, number: int = 10
) -> list[dict]:
    """Time each op kind the NNAPI partitions hold, compiled alone for the device's CPU, over RPC
    (tvmgen bench's machinery); returns one row per kind: measured GFLOP/s (median of ``repeat``
    repeats of ``number`` runs), or the table's rate where a kind cannot be built alone."""
    from tvmgen.compiler import pipeline
    from tvmgen.compiler.targets.platforms import BuildTarget, get_platform

    with step(f"Connecting to device {target.key!r}"):
        remote, info = bench.connect(target)
    plat = get_platform(platform or info.get("platform") or "host")
    cpu = BuildTarget(plat, "cpu")
    rows = []
    for kind, (call, flops) in op_instances(partitioned).items():
        table = rate_gflops(kind, costs["tvm_gflops"])
        row = {"op": kind, "flops": flops, "source": "table", "gflops": table, "table_gflops": table}
        model = single_op_model(kind, call)
        if model is None:
            row["why"] = "its operands cannot be given as inputs of a one-op model"
            rows.append(row)
            continue
        row["inputs"] = [list(s.shape) for s in model.inputs]
        directory = scratch / f"op-{kind}"
        pipeline.compile_model(model, cpu, directory, info={"name": f"op-{kind}"})
        timed = bench.bench_model(remote, info, directory, target.key, repeat, number, 0, seed=0)
        median = float(np.median(timed.warm_ms))
        row.update(
            source="measured",
            median_ms=median,
            gflops=flops / (median / 1e3) / 1e9,
            device=f"{info.get('platform', plat.name)} ({info.get('arch', plat.arch)})",
        )
        rows.append(row)
    return rows
