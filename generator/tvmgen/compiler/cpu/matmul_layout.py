"""Matrix products with constant weights compute whole vectors of output columns.

The CPU schedules tile a matmul's output columns (N, the weights' last axis) in whole vectors
(``reduction_rules``). A classifier over a character set has a column count that no vector width
divides (6,625, 8,210, 18,385 classes in CTC text recognizers): the rule found no vector tile and
the product ran as scalar code, 7 GFLOP/s for a [1, 40, 120] x [120, 6625] head that took 99% of the
run. ``pad_matmul_columns`` gives such a product zero columns up to a multiple of the vector width
and slices the result back, as ``conv_layout.pad_conv_output_channels`` does for convolutions' output
channels; a constant bias added after the slice is padded and moved before it, so the kernel keeps
the add in its epilogue and the slice is the kernel's last step.

A softmax over those columns (a CTC head's probabilities) then ran over rows of 18,385: no vector width
divides them, so its maxima and sums were reduced in partials of 5. ``softmax_over_padded_columns``
moves the slice after the softmax and gives the padded columns a logit of -1e30, whose exponential is
0 to float precision: the softmax runs over rows of whole vectors.
"""

from __future__ import annotations


def pad_matmul_columns(
    mod, lanes: int, head_vectors: int = 1, head_tiles: int = 1, head_rows: int = 0, row_tile: int = 0
):
    """``matmul(x, W)`` (float32 constant W of rank 2, [C, N], N >= lanes and not a multiple of half of lanes) ->
    ``strided_slice(matmul(x, W padded with zero columns to a multiple of lanes), last axis [0, N))``, and
    ``add(that slice, constant bias)`` -> ``strided_slice(add(wide matmul, bias padded), ...)``. With at least
    ``head_tiles`` tiles of ``head_vectors`` vectors of columns over 2 to ``head_rows`` rows (a classifier head
    over thousands of classes, ``reduction_rules._wide_head``), the columns are padded to whole such tiles (at
    most 1/``head_tiles`` more work); a matrix-vector product keeps its own rule.

    ``row_tile`` (16 vector registers: the 6 rows a tile of two vectors holds): where the columns are pairs of
    vectors, the rows of ``x`` (its second last axis, the axes before it 1) that neither ``row_tile`` nor the
    row count before it divide are padded with zero rows to a multiple of ``row_tile`` where that adds at most
    a twelfth, and sliced off with the columns: their tiles had 4 rows (8 accumulators, too few to hide the
    multiply-add's latency). A CTC head of 64 x 1,024 x
    8,224 on a Zen 2 core: 17.0 ms in tiles of 4 rows, 14.2 ms over 66 rows in tiles of 6."""
    import numpy as np
    from tvm import relax
    from tvm.relax.dpl import rewrite_call
    from tvm.relax.dpl.pattern import is_const, is_op, wildcard

    from tvmgen.compiler.cpu.conv_layout import move_bias_before_slice
    from tvmgen.compiler.rewrites import static_shape

    x, w = wildcard(), is_const()
    product = is_op("relax.matmul")(x, w)

    def column_unit(columns: int, rows: int) -> int:
        """The multiple the columns are padded to (1: left as they are)."""
        if head_vectors > 1 and columns >= lanes * head_vectors * head_tiles and 1 < rows <= head_rows:
            return lanes * head_vectors  # a wide head: whole tiles of its vectors
        if columns < lanes or columns % max(lanes // 2, 1) == 0:
            # Half vectors already tile well (1,000 classes in 8-float tiles on AVX-512 ran as fast as 1,008
            # in 16-float ones): only a column count with no half-vector tile is padded.
            return 1
        return lanes

    def extra_rows(data) -> int:
        """Zero rows to add to ``data`` (0: none)."""
        shape = static_shape(data)
        if row_tile < 2 or not shape or None in shape or len(shape) < 2 or any(d != 1 for d in shape[:-2]):
            return 0
        rows = shape[-2]
        if rows <= row_tile or rows % row_tile == 0 or rows % (row_tile - 1) == 0:
            return 0
        extra = -rows % row_tile
        return extra if extra * 12 <= rows else 0

    def pad(expr, matches):
        weights = matches[w]
        shape = [int(d) for d in weights.ty.shape.values] if weights.ty.shape is not None else []
        if len(shape) != 2 or str(weights.ty.dtype) != "float32" or expr.ty.shape is None:
            return expr
        columns = shape[1]
        out_rows = (static_shape(expr) or [None])[:-1]
        rows = int(np.prod(out_rows)) if None not in out_rows else 0
        unit = column_unit(columns, rows)
        padded = -(-columns // unit) * unit
        added = extra_rows(matches[x]) if rows and padded % (2 * lanes) == 0 else 0  # tiles of 2 vectors only
        if padded == columns and not added:
            return expr
        wide = relax.const(np.pad(weights.value.numpy(), [(0, 0), (0, padded - columns)]), "float32")
        data = matches[x]
        rank = len(expr.ty.shape.values)
        if added:
            data = relax.op.nn.pad(data, [0, 0] * (rank - 2) + [0, added, 0, 0])
        out_dtype = str(expr.attrs.out_dtype) if expr.attrs.out_dtype is not None else ""
        full = relax.op.matmul(data, wide, out_dtype=out_dtype if out_dtype not in ("", "void") else None)
        return _slice_back(full, rank, int(out_rows[-1]) if added else None, columns if padded != columns else None)

    mod["main"] = rewrite_call(product, pad, mod["main"])
    return move_bias_before_slice(mod, is_op("relax.matmul")(wildcard(), is_const()))


def _slice_back(value, rank: int, rows: int | None, columns: int | None):
    """``value`` (of ``rank`` axes) sliced to its first ``rows`` rows (second last axis) and first ``columns``
    columns (last axis); None: that axis whole."""
    from tvm import relax

    axes = ([rank - 2] if rows is not None else []) + ([rank - 1] if columns is not None else [])
    ends = [e for e in (rows, columns) if e is not None]
    return relax.op.strided_slice(value, axes=axes, begin=[0] * len(axes), end=ends)


# A padded column's logit: exp(-1e30 - max) is exp's smallest result (fast_math.vector_exp clamps its argument
# to -87: 1.6e-38), against a row sum of at least 1 (the maximum's own term).
_MASKED = -1e30


def softmax_over_padded_columns(mod):
    """``softmax(strided_slice(P, last axis [0, n)), axis=-1)`` -> ``strided_slice(softmax(P + mask), ...)`` for
    ``P`` a product padded by ``pad_matmul_columns`` (``matmul(x, W)``, or with a constant bias added), whose
    columns from ``n`` on are zero weights and zero bias, so finite: ``mask`` is 0 on the first ``n`` columns
    and -1e30 on the rest, which leaves the maximum and the sum of the row's exponentials as they were. Where
    ``pad_matmul_columns`` padded the rows too (zero rows: finite logits), the softmax runs over them as well
    and the slice takes both back."""
    import numpy as np
    from tvm import relax
    from tvm.relax.dpl import rewrite_call
    from tvm.relax.dpl.pattern import is_const, is_op, wildcard

    from tvmgen.compiler.cpu.conv_layout import padding_slice

    weights, bias = is_const(), is_const()
    product = is_op("relax.matmul")(wildcard(), weights)
    padded = product | is_op("relax.add")(product, bias)
    sliced = is_op("relax.strided_slice")(padded, varg_default_wildcard=True)
    reshaped = is_op("relax.reshape")(sliced, wildcard())  # e.g. [40, N] -> [1, 40, N]: the rows regrouped
    softmax = is_op("relax.nn.softmax")(sliced | reshaped)

    def move(expr, matches):
        s, wide = matches[sliced], matches[padded]
        if wide.ty.shape is None or s.ty.shape is None or str(s.ty.dtype) != "float32":
            return expr
        full = [int(d) for d in wide.ty.shape.values]
        out = [int(d) for d in s.ty.shape.values]
        rows = [int(d) for d in expr.ty.shape.values] if expr.ty.shape is not None else []
        slicing = padding_slice(s, full)
        if not rows or rows[-1] != out[-1] or slicing is None:
            return expr  # a reshape that keeps each row whole only
        axis = int(expr.attrs.axis)
        axis = axis + len(rows) if axis < 0 else axis
        axes, _ = slicing
        n = out[-1]
        columns, padded_rows = len(full) - 1 in axes, len(full) - 2 in axes
        if axis != len(rows) - 1 or (columns and full[-1] <= n):
            return expr
        if padded_rows and (len(rows) < 2 or rows[-2] != out[-2] or any(d != 1 for d in rows[:-2] + out[:-2])):
            return expr  # padded rows regrouped other than by leading axes of 1
        w = matches[weights].value.numpy()
        if w.ndim != 2 or w.shape[-1] != full[-1] or np.any(w[:, n:]):
            return expr  # the columns beyond n must be the zero columns the padding added
        if bias in matches:
            b = matches[bias].value.numpy()
            if b.shape[-1:] != (full[-1],) or np.any(b[..., n:]):
                return expr
        mask = np.zeros(full[-1], np.float32)
        mask[n:] = _MASKED
        logits = relax.op.add(wide, relax.const(mask, "float32")) if columns else wide
        grouped = [*rows[:-2], full[-2], full[-1]] if padded_rows else [*rows[:-1], full[-1]]
        if grouped != full:
            logits = relax.op.reshape(logits, grouped)
        probabilities = relax.op.nn.softmax(logits, axis=-1)
        return _slice_back(probabilities, len(rows), out[-2] if padded_rows else None, n if columns else None)

    mod["main"] = rewrite_call(softmax, move, mod["main"])
    return mod
