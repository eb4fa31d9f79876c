"""Constant inputs of custom TFLite operators (weights, bias) as tvmgen's conversions need them: a stored
buffer, a value the converter prefetched, or the value of what the graph computes from constants,
evaluated here (``constant_value``). Its own module so that the converters (mediapipe_ops) and the
TFLite importer (tflite_ops) both use it without importing each other."""

from __future__ import annotations

import numpy as np

# TFLite TensorType enum -> numpy dtype name (tflite/TensorType.py).
TENSOR_TYPES = {0: "float32", 1: "float16", 2: "int32", 3: "uint8", 4: "int64", 6: "bool", 7: "int16", 9: "int8"}


def constant_value(conv, tensor, op_name: str, what: str) -> np.ndarray:
    """The value of ``tensor``, the input ``what`` ("weights", "bias") of custom operator ``op_name``
    that tvmgen needs as a constant: the tensor's buffer (in line or after the flatbuffer), a value
    the converter prefetched (DENSIFY), or else the value of the expression the converter built for
    whatever computes the tensor (DEQUANTIZE of fp16 or of int8/uint8 weights, any chain of
    operators on constants), evaluated here. A tensor computed from the model's inputs is refused."""
    from tvmgen.core.errors import ModelError

    name = tensor.tensor.Name().decode(errors="replace")
    subject = f"custom operator {op_name}: its {what} (tensor '{name}')"
    are = "are" if what.endswith("s") else "is"
    fix = f"re-export the model with the {what} of {op_name} stored as constants"
    if conv.is_prefetched(tensor.tensor_idx) or not conv.has_expr(tensor.tensor_idx):
        buffer = tensor.buffer
        stored = not isinstance(buffer.DataAsNumpy(), int) or (hasattr(buffer, "Offset") and buffer.Offset() > 1)
        if not conv.is_prefetched(tensor.tensor_idx) and not stored:
            raise ModelError(
                f"{subject} {are} not constant: the file holds no value for the tensor and no operator computes it", fix
            )
        return np.asarray(conv.get_tensor_value(tensor))
    expr = conv.get_expr(tensor.tensor_idx)
    order, unbound = _bindings_used(conv, expr)
    model_inputs = {
        str(conv.get_expr(int(i)).name): conv.get_expr(int(i))
        for i in conv.subgraph.InputsAsNumpy()
        if conv.has_expr(int(i))
    }
    from_inputs = [n for n, v in model_inputs.items() if any(v.same_as(u) for u in unbound)]
    if from_inputs:
        raise ModelError(
            f"{subject} {are} not constant: computed from the model's input(s) "
            f"{', '.join(from_inputs)} at run time, and tvmgen needs the {what} of {op_name} "
            "constant",
            fix,
        )
    try:
        if unbound:
            raise ValueError(f"it depends on {', '.join(str(v.name) for v in unbound)}")
        return _evaluate(conv, expr, order)
    except Exception as e:
        raise ModelError(
            f"{subject} {are} not constant: computed by operators tvmgen could not evaluate to a "
            f"constant ({type(e).__name__}: {(str(e).strip().splitlines() or [''])[-1][:200]})",
            fix,
        ) from e


def _bindings_used(conv, expr):
    """The variables ``expr`` uses, directly or through the converter's earlier bindings:
    ([(variable, bound value)] in binding order, [variables bound to nothing: the model's inputs])."""
    from tvm import relax

    order, unbound, seen = [], [], []

    def visit(e):
        for var in relax.analysis.free_vars(e):
            if any(var.same_as(v) for v in seen):
                continue
            seen.append(var)
            value = conv.bb.lookup_binding(var)
            if value is None:
                unbound.append(var)
                continue
            visit(value)
            order.append((var, value))

    visit(expr)
    return order, unbound


def _evaluate(conv, expr, bindings) -> np.ndarray:
    """The value of a Relax expression that uses no model input: a function of no parameters
    (the bindings it uses, then the expression), legalised and constant-folded to one constant."""
    import tvm
    from tvm import relax

    out = relax.Var("value", expr.ty)
    block = relax.DataflowBlock([relax.VarBinding(v, value) for v, value in bindings] + [relax.VarBinding(out, expr)])
    func = relax.Function([], relax.SeqExpr([block], out), expr.ty).with_attr("global_symbol", "main")
    mod = relax.transform.Normalize()(tvm.IRModule({"main": func}))
    mod = relax.transform.FoldConstant()(relax.transform.LegalizeOps()(mod))
    body = mod["main"].body
    result = body.body
    for block in reversed(body.blocks):
        for binding in block.bindings:
            if binding.var.same_as(result):
                result = binding.value
    if not isinstance(result, tvm.ir.expr.Constant):
        raise ValueError(f"it did not fold to a constant ({type(result).__name__} left)")
    return result.value.numpy()
