"""Division by a constant as multiplication by its reciprocal.

The importers spell hard-swish ``x * relu6(x + 3) / 6`` (TFLite ``HARD_SWISH``, Keras' MobileNetV3)
and other scalings as a ``divide`` by a constant, and LLVM keeps a float division by a constant
that is not a power of two (``x / 6`` and ``x * (1 / 6)`` can differ in the last bit). A vector
division costs about ten multiplications (AVX-512: one ``vdivps`` per ~10 cycles; NEON has no
vector division at all on ARMv7), and hard-swish divides every activation of a MobileNetV3 layer.
``x * (1 / c)`` is within one ulp of ``x / c``; onnxruntime's HardSwish multiplies by 1/6 itself.
"""

from __future__ import annotations

import numpy as np


def divide_by_constants(mod):
    """``divide(x, c)`` (float ``x``, ``c`` a float constant with no zero) -> ``multiply(x, 1 / c)``."""
    import tvm
    from tvm import relax
    from tvm.relax.dpl.pattern import is_const, is_op, wildcard

    from tvmgen.compiler.rewrites import rewrite_functions

    x, c = wildcard(), is_const()
    pattern = is_op("relax.divide")(x, c)

    def rewrite(expr, matches):
        const = matches[c]
        if not isinstance(const, tvm.ir.expr.GenericConst):
            return expr
        value = const.value.numpy()
        if (
            value.dtype.kind != "f"
            or str(matches[x].ty.dtype) != str(value.dtype)
            or not np.all(np.isfinite(value))
            or np.any(value == 0)
        ):
            return expr
        inverse = (np.ones((), value.dtype) / value).astype(value.dtype)
        if not np.all(np.isfinite(inverse)):  # a subnormal divisor
            return expr
        return relax.op.multiply(matches[x], relax.const(inverse, str(value.dtype)))

    return rewrite_functions(mod, pattern, rewrite)


def DivideByConstants():  # noqa: N802 - a pass, named like TVM's
    from tvmgen.compiler.rewrites import module_pass

    return module_pass("TvmgenDivideByConstants", divide_by_constants)
