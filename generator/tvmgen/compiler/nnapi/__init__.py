"""NNAPI partitioning: which parts of a model Android's NNAPI would run, and whether that pays.

TVM 0.27 ships a pattern-based partitioner (tvm.relax.backend.contrib.nnapi, 31 patterns) but not
the NNAPI code generator or runtime in its PyPI build. This module prepares a model the way TVM's
own NNAPI flow does (constant folding, 2-D matmuls as batched matmuls, clip as maximum/minimum),
runs the partitioner, and reports the result: partitions, the operators on each side with their
share of FLOPs, what blocks a larger partition, and the NNAPI<->TVM transitions per inference.

On top of the patterns, the `cost` strategy searches the placement with a cost table: dynamic
programming over the operators in execution order, with a cost for every switch between TVM and
NNAPI, so a piece too small to pay for its transitions stays on TVM. The table is static, or its TVM
side is measured on a device over RPC (each op kind built alone and timed with bench's machinery).

With a TVM that has the NNAPI code generator (USE_NNAPI_CODEGEN=ON), `generate` turns the chosen
placement into a module for an ordinary CPU build: rejected partitions become plain Relax functions
again, the rest go through relax.transform.RunCodegen.

Modules: report (preparation, operators, FLOPs, the report), placement (patterns / cost strategy),
costs (TVM-side costs measured over RPC), codegen (the NNAPI build).
"""

from tvmgen.compiler.nnapi.codegen import (
    CODEGEN,
    RUNTIME_NEEDS,
    NnapiBuildError,
    _nnapi_calls,
    generate,
    has_codegen,
    keep_on_tvm,
    partition_and_generate,
    require_codegen,
    runtime_needs,
)
from tvmgen.compiler.nnapi.costs import format_costs, op_instances, single_op_model, with_measured
from tvmgen.compiler.nnapi.placement import (
    DEFAULT_COSTS,
    cost_strategy,
    load_costs,
    op_cost_ms,
    partition,
    transition_ms,
)
from tvmgen.compiler.nnapi.report import Op, Report, analyse, format_report, op_flops, prepare, why_not_nnapi

__all__ = [
    "CODEGEN",
    "DEFAULT_COSTS",
    "RUNTIME_NEEDS",
    "NnapiBuildError",
    "Op",
    "Report",
    "_nnapi_calls",
    "analyse",
    "cost_strategy",
    "format_costs",
    "format_report",
    "generate",
    "has_codegen",
    "keep_on_tvm",
    "load_costs",
    "op_cost_ms",
    "op_flops",
    "op_instances",
    "partition",
    "partition_and_generate",
    "prepare",
    "require_codegen",
    "runtime_needs",
    "single_op_model",
    "transition_ms",
    "why_not_nnapi",
    "with_measured",
]
