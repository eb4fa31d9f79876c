"""Matrix products with constant weights compute whole vectors of output columns.

The CPU schedules tile a matmul's output columns (N, the weights' last axis) in whole vectors
(``reduction_rules``). A classifier over a character set has a column count that no vector width
divides (6,625, 8,210, 18,385 classes in CTC text recognizers): the rule found no vector tile and
the product ran as scalar code, 7 GFLOP/s for a [1, 40, 120] x [120, 6625] head that took 99% of the
run. ``pad_matmul_columns`` gives such a product zero columns up to a multiple of the vector width
and slices the result back, as ``conv_layout.pad_conv_output_channels`` does for convolutions' output
channels; a constant bias added after the slice is padded and moved before it, so the kernel keeps
the add in its epilogue and the slice is the kernel's last step.
"""

from __future__ import annotations


def pad_matmul_columns(mod, lanes: int):
    """``matmul(x, W)`` (float32 constant W of rank 2, [C, N], N >= lanes and not a multiple of half of lanes) ->
    ``strided_slice(matmul(x, W padded with zero columns to a multiple of lanes), last axis [0, N))``, and
    ``add(that slice, constant bias)`` -> ``strided_slice(add(wide matmul, bias padded), ...)``."""
    import numpy as np
    from tvm import relax
    from tvm.relax.dpl import rewrite_call
    from tvm.relax.dpl.pattern import is_const, is_op, wildcard

    from tvmgen.compiler.cpu.conv_layout import move_bias_before_slice

    x, w = wildcard(), is_const()
    product = is_op("relax.matmul")(x, w)

    def pad(expr, matches):
        weights = matches[w]
        shape = [int(d) for d in weights.ty.shape.values] if weights.ty.shape is not None else []
        if len(shape) != 2 or str(weights.ty.dtype) != "float32" or expr.ty.shape is None:
            return expr
        columns = shape[1]
        padded = -(-columns // lanes) * lanes
        # Half vectors already tile well (1,000 classes in 8-float tiles on AVX-512 ran as fast as 1,008
        # in 16-float ones): only a column count with no half-vector tile is padded.
        if columns < lanes or columns % max(lanes // 2, 1) == 0:
            return expr
        wide = relax.const(np.pad(weights.value.numpy(), [(0, 0), (0, padded - columns)]), "float32")
        out_dtype = str(expr.attrs.out_dtype) if expr.attrs.out_dtype is not None else ""
        full = relax.op.matmul(matches[x], wide, out_dtype=out_dtype if out_dtype not in ("", "void") else None)
        rank = len(expr.ty.shape.values)
        return relax.op.strided_slice(full, axes=[rank - 1], begin=[0], end=[columns])

    mod["main"] = rewrite_call(product, pad, mod["main"])
    return move_bias_before_slice(mod, is_op("relax.matmul")(wildcard(), is_const()))
