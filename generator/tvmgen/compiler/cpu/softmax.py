"""Softmax on CPUs: lowered with exp in vectors and one division per row, and scheduled.

TVM lowers ``relax.nn.softmax`` to four loops over the whole tensor (the row maximum, exp, the
row sum, the division) that no default schedule rule fits (two reductions): one thread, no
vectors, and ``exp`` a libm call per element. tvmgen lowers a float32 softmax over the last axis
itself (``legalize_softmax``): ``exp`` written out so it vectorises (``fast_math.vector_exp``; its
argument ``x - max`` is at most 0, so one clamp), the row sum inverted once per row and multiplied.
The default schedules' rule for reductions along rows (``schedule_rules.schedule_rows``) then
makes each row a parallel task that computes its
maximum, exponentials, sum and output while the row is in cache, the element loops in vectors.
A long row not of whole 4-float vectors (18,385 classes, no constant product before it to pad:
``matmul_layout.softmax_over_padded_columns``) reduces its whole vectors and its last values apart: its
reductions over the whole row had partials of 5 (the count's best divisor), vectors mostly masked.
A softmax over another axis is moved last and back by two transposes; float16 ones keep TVM's lowering.
"""

from __future__ import annotations

BLOCKS = ("softmax_max", "softmax_exp", "softmax_sum", "softmax_out")
_WHOLE = 16  # floats: a whole AVX-512 vector, two of AVX2, four of NEON
_RAGGED_ROW = 256  # a row this long, not of whole 4-float vectors, reduces its whole vectors and its tail apart


def legalize_softmax(bb, call):
    from tvm import te, tirx, topi

    from tvmgen.compiler.cpu.fast_math import vector_exp

    x = call.args[0]
    ndim = len(x.ty.shape.values) if x.ty.shape is not None else 0
    axis = int(call.attrs.axis)
    if str(x.ty.dtype) != "float32" or ndim == 0:
        return bb.call_te(topi.nn.softmax, x, axis, primfunc_name_hint="softmax")
    axis = axis % ndim
    order = None
    if axis != ndim - 1:
        # another axis (YOLOv8's distribution focal loss: 16 bins on axis 1 of [1, 16, 4, anchors]): moved
        # last and back, two transposes of a tensor that is read once anyway; TVM's own softmax of that
        # axis ran unscheduled, one thread and no vectors (0.71 ms of the 320-pixel detector's 20 ms)
        order = [a for a in range(ndim) if a != axis] + [axis]
        x = bb.emit_te(topi.transpose, x, order, primfunc_name_hint="softmax_axis_last")

    def softmax(t):
        *outer, n = t.shape
        length = int(n) if isinstance(n, tirx.IntImm) else 0
        # A long row no vector width divides (18,385 classes): each reduction over its whole vectors (partials
        # in vectors) and, apart, over its last few values, the two combined where they are read. (A row of
        # whole quarter vectors, 1,000 classes, keeps schedule_rows' partials of half or quarter vectors.)
        tail = length % _WHOLE if length >= _RAGGED_ROW and length % 4 else 0
        whole = length - tail if tail else n
        one = tirx.const(1.0, "float32")

        def reduced(name, op, source, axis):
            """``op`` of ``source`` along each row: one reduction, or (over the row's whole vectors, over its tail)
            where it has a tail (the tail's axis from 0: a reduction axis from another start got loops of a
            negative extent where ``schedule_rows`` computes it at its row)."""
            k = te.reduce_axis((0, whole), axis)
            main = te.compute(outer, lambda *i: op(source(*i, k), axis=k), name=name)
            if not tail:
                return main
            kt = te.reduce_axis((0, tail), axis + "t")
            rest = te.compute(outer, lambda *i: op(source(*i, whole + kt), axis=kt), name=name + "_tail")
            return main, rest

        peak = reduced(BLOCKS[0], te.max, t, "k")
        top = (lambda *i: te.max(peak[0](*i), peak[1](*i))) if tail else peak
        e = te.compute(t.shape, lambda *i: vector_exp(t(*i) - top(*i[:-1]), at_most_zero=True), name=BLOCKS[1])
        sums = reduced(BLOCKS[2], te.sum, e, "k2")
        total = (lambda *i: sums[0](*i) + sums[1](*i)) if tail else sums
        return te.compute(t.shape, lambda *i: e(*i) * (one / total(*i[:-1])), name=BLOCKS[3])

    if order is None:
        return bb.call_te(softmax, x, primfunc_name_hint="softmax")
    y = bb.emit_te(softmax, x, primfunc_name_hint="softmax")
    back = [order.index(a) for a in range(ndim)]
    return bb.call_te(topi.transpose, y, back, primfunc_name_hint="softmax_axis_back")
