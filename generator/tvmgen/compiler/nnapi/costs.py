"""The TVM side of the cost table measured on a device: each operator kind the NNAPI partitions hold,
built alone and timed over RPC with bench's machinery."""

from __future__ import annotations

import json

from tvmgen.compiler.nnapi.report import inner_ops, tensor_shape
from tvmgen.core.errors import TvmgenError


def op_instances(partitioned) -> dict[str, tuple]:
    """Per Relax op kind inside the NNAPI partitions (what the cost strategy places): the call with
    the most FLOPs, which stands for its kind when measured, and those FLOPs."""
    from tvm import relax

    found: dict[str, tuple] = {}
    for fn in partitioned.functions.values():
        if isinstance(fn, relax.Function) and fn.attrs is not None and "Codegen" in fn.attrs:
            for kind, call, flops in inner_ops(fn)[2]:
                if kind not in found or flops > found[kind][1]:
                    found[kind] = (call, flops)
    return dict(sorted(found.items()))


def single_op_model(kind: str, call):
    """An ImportedModel whose main runs ``call`` alone, its tensor operands as inputs (None when an
    operand is neither a tensor nor a constant, or a shape is not static)."""
    from tvm import ir, relax

    from tvmgen.core.model import ImportedModel, TensorSpec

    params: list = []  # relax.Var
    args: list = []  # relax expressions
    specs: list[TensorSpec] = []
    for a in call.args:
        if isinstance(a, ir.Constant):
            args.append(a)
        elif (
            isinstance(a, relax.Var)
            and isinstance(a.ty, relax.TensorType)
            and a.ty.shape is not None
            and len(tensor_shape(a.ty)) == a.ty.ndim
        ):  # a static shape (scalars included)
            name = f"x{len(params)}"
            v = relax.Var(name, a.ty)
            params.append(v)
            args.append(v)
            specs.append(TensorSpec(name, tuple(tensor_shape(a.ty)), str(a.ty.dtype)))
        else:
            return None
    bb = relax.BlockBuilder()
    with bb.function("main", params, attrs={"num_input": len(params)}):
        with bb.dataflow():
            out = bb.emit_output(relax.Call(call.op, args, call.attrs, call.ty_args))
        bb.emit_func_output(out)
    return ImportedModel(bb.get(), [], specs, [kind], "relax", "", _no_reference)


def _no_reference(inputs):
    """A one-op model is compiled and timed, never checked: it has no reference runtime."""
    raise TvmgenError("a one-operator cost model has no reference runtime to check against")


def with_measured(costs: dict, rows: list[dict]) -> dict:
    """The cost table with its TVM column replaced by the measured rates."""
    out = json.loads(json.dumps(costs))
    out["tvm_gflops"].update({r["op"]: r["gflops"] for r in rows if r["source"] == "measured"})
    return out


def format_costs(rows: list[dict]) -> str:
    device = next((r["device"] for r in rows if "device" in r), "?")
    lines = [
        f"TVM-side costs measured on {device} (median; NNAPI-side and transition costs stay from the cost table):",
        f"  {'op':<14}{'MFLOP':>10}{'median ms':>12}{'GFLOP/s':>10}{'table':>8}  source",
    ]
    for r in rows:
        ms = f"{r['median_ms']:.4f}" if "median_ms" in r else "-"
        lines.append(
            f"  {r['op']:<14}{r['flops'] / 1e6:>10.3f}{ms:>12}{r['gflops']:>10.2f}{r['table_gflops']:>8.1f}  "
            f"{r['source']}{' (' + r['why'] + ')' if 'why' in r else ''}"
        )
    return "\n".join(lines)
