"""Fused LSTM and GRU layers as the importers leave them: one call per direction of a layer, to an
external function named after the layer's shape (``PREFIX`` + its spec as JSON). The compiler turns each
call into its kernel for the target (compiler/recurrent.py: the CPU or the GPU variant), so the importer
never decides which. Nothing folds or fuses such a call before then: to TVM's passes it is opaque.

Signatures (one direction; ONNX gate orders, weights transposed):
  LSTM: X[S,B,I], Wt[I,4H], Rt[H,4H], bias[4H] (Wb + Rb), h0[B,H], c0[B,H] -> Y[S,B,H], C[B,H]
  GRU:  X[S,B,I], Wt[I,3H], Rt[H,3H], wb[3H], rb[3H], h0[B,H]            -> Y[S,B,H]
"""

from __future__ import annotations

import json

PREFIX = "tvmgen.recurrent:"


def spec(kind: str, seq: int, batch: int, inputs: int, hidden: int, reverse: bool, linear_before_reset: int = 0):
    return {
        "kind": kind,
        "S": int(seq),
        "B": int(batch),
        "I": int(inputs),
        "H": int(hidden),
        "reverse": bool(reverse),
        "lbr": int(linear_before_reset),
    }


def output_types(sp: dict):
    from tvm import relax

    y = relax.TensorType([sp["S"], sp["B"], sp["H"]], "float32")
    return [y, relax.TensorType([sp["B"], sp["H"]], "float32")] if sp["kind"] == "lstm" else [y]


def emit(bb, sp: dict, args: list):
    """The layer ``sp`` (see ``spec``) called from Relax: (Y,) for a GRU, (Y, C) for an LSTM."""
    from tvm import relax

    callee = relax.ExternFunc(PREFIX + json.dumps(sp, sort_keys=True))
    outs = output_types(sp)
    if len(outs) == 1:
        return [bb.emit(relax.call_dps_packed(callee, args, outs[0]))]
    call = bb.emit(relax.call_dps_packed(callee, args, outs))
    return [bb.emit(relax.TupleGetItem(call, i)) for i in range(len(outs))]
