"""Relax rewrites shared by the CPU pipeline and the NNAPI partitioner."""

from __future__ import annotations


def tir_min_max_as_relax(mod):
    """``call_tir(maximum|minimum, (x, scalar const))`` -> ``relax.op.maximum|minimum(x, c)``.

    Importers lower Clip / ReLU6 to prebuilt TIR functions with a scalar bound. Nothing that
    works on Relax operators sees through such a call: NNAPI's patterns do not match it, and
    layout conversion wraps it in transposes. Giving the bounds back their Relax operators fixes
    both; unused TIR functions are removed.
    """
    from tvm import ir, relax
    from tvm.relax.dpl import rewrite_call
    from tvm.relax.dpl.pattern import is_op, wildcard

    call = is_op("relax.call_tir")(wildcard(), wildcard())

    def relax_min_max(expr, _matches):
        func, args = expr.args[0], expr.args[1]
        kind = func.name_hint.rstrip("0123456789_")
        fields = list(getattr(args, "fields", []))
        if kind in ("maximum", "minimum") and len(fields) == 2 and isinstance(fields[1], ir.Constant) \
                and len(fields[1].ty.shape.values) == 0:
            return getattr(relax.op, kind)(fields[0], fields[1])
        return expr

    mod["main"] = rewrite_call(call, relax_min_max, mod["main"])
    return relax.transform.DeadCodeElimination()(mod)
