"""float64 inside a model, computed in float32 on the GPU.

Exporters leave double-precision arithmetic inside float32 models: a PyTorch trace of ``torch.arange(n) + 0.5``
(a detector's anchor points) gives float64 constants and casts, an ONNX graph may cast to double and back. GPUs
give float64 little or nothing: OpenCL makes it an extension (``cl_khr_fp64``) that phones' drivers mostly lack,
Vulkan a feature (``shaderFloat64``) tvmgen's code generator does not use. ``demote`` computes such a model's
float64 values in float32 on GPU targets: its float64 constants become float32 ones and its casts to float64
casts to float32. A model whose inputs or outputs are float64 keeps them (its build fails as before, naming the
kernel); anything the rewrite cannot type (an operator that makes float64 from its attributes) leaves the
module as it was. The compile output says how many values and casts it changed.
"""

from __future__ import annotations

import logging

log = logging.getLogger("tvmgen.compiler")


def _is_f64(ty) -> bool:
    """A float64 tensor type, or a tuple type holding one."""
    from tvm import relax

    if isinstance(ty, relax.TensorType):
        return str(ty.dtype) == "float64"
    return any(_is_f64(f) for f in getattr(ty, "fields", None) or ())


def demote(mod):
    """``(mod, count)``: ``mod`` with its functions' float64 constants and casts made float32 (``count`` of
    them), or ``(mod, 0)`` unchanged where there are none, a function takes or returns float64, or the
    rewritten function does not type."""
    import tvm
    from tvm import relax

    @relax.expr_functor.mutator
    class Demote(relax.PyExprMutator):
        def __init__(self, module):
            super().__init__(module)
            self.count = 0

        def _value(self, e):
            if isinstance(e, tvm.ir.Constant) and _is_f64(e.ty):
                self.count += 1
                return relax.const(e.value.numpy().astype("float32"), "float32")
            return e

        def visit_call_(self, op):
            args = [self._value(self.visit_expr(a)) for a in op.args]
            if isinstance(op.op, tvm.ir.Op) and op.op.name == "relax.astype" and str(op.attrs.dtype) == "float64":
                self.count += 1
                return relax.op.astype(args[0], "float32")
            if all(a.same_as(b) for a, b in zip(args, op.args)):
                return op
            return tvm.ir.Call(op.op, args, op.attrs, op.ty_args, op.span)

    total = 0
    out = mod
    for gv, func in mod.functions_items():
        if not isinstance(func, relax.Function):
            continue
        if any(_is_f64(p.ty) for p in func.params) or _is_f64(func.ret_ty):
            continue
        mutator = Demote(mod)
        try:
            new = mutator.visit_expr(func)
        except Exception as e:  # an operator whose float64 comes from its attributes: left as it was
            log.info("float64 in %s left as it is: %s", gv.name_hint, str(e).strip().splitlines()[-1:])
            continue
        if mutator.count:
            out = out if out is not mod else tvm.IRModule(dict(mod.functions_items()), attrs=mod.attrs)
            out[gv] = new
            total += mutator.count
    return out, total


def demote_pass(report: dict | None = None):
    """``demote`` as a module pass; ``report["float64_demoted"]`` gets the count."""
    import tvm

    @tvm.transform.module_pass(opt_level=0, name="TvmgenDemoteFloat64")
    def _pass(mod, _ctx):
        mod, count = demote(mod)
        if count and report is not None:
            report["float64_demoted"] = report.get("float64_demoted", 0) + count
        return mod

    return _pass
