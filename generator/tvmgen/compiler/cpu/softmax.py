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
        # (a row of whole quarter vectors, 1,000 classes, keeps schedule_rows' partials of half or quarter vectors)
        tail = length % _WHOLE if length >= _RAGGED_ROW and length % 4 else 0
        one = tirx.const(1.0, "float32")
        if not tail:
            k = te.reduce_axis((0, n), "k")
            mx = te.compute(outer, lambda *i: te.max(t(*i, k), axis=k), name=BLOCKS[0])
            e = te.compute(t.shape, lambda *i: vector_exp(t(*i) - mx(*i[:-1]), at_most_zero=True), name=BLOCKS[1])
            k2 = te.reduce_axis((0, n), "k2")
            s = te.compute(outer, lambda *i: te.sum(e(*i, k2), axis=k2), name=BLOCKS[2])
            return te.compute(t.shape, lambda *i: e(*i) * (one / s(*i[:-1])), name=BLOCKS[3])
        # A long row no vector width divides (18,385 classes): each reduction over its whole vectors (partials
        # in vectors) and, apart, over its last few values, the two combined where they are read.
        whole = length - tail
        # (the tail's axes from 0: a reduction axis from another start got loops of a negative extent where
        # ``schedule_rows`` computes it at its row)
        k, kt = te.reduce_axis((0, whole), "k"), te.reduce_axis((0, tail), "kt")
        mx = te.compute(outer, lambda *i: te.max(t(*i, k), axis=k), name=BLOCKS[0])
        mt = te.compute(outer, lambda *i: te.max(t(*i, whole + kt), axis=kt), name=BLOCKS[0] + "_tail")
        e = te.compute(
            t.shape,
            lambda *i: vector_exp(t(*i) - te.max(mx(*i[:-1]), mt(*i[:-1])), at_most_zero=True),
            name=BLOCKS[1],
        )
        k2, k2t = te.reduce_axis((0, whole), "k2"), te.reduce_axis((0, tail), "k2t")
        s = te.compute(outer, lambda *i: te.sum(e(*i, k2), axis=k2), name=BLOCKS[2])
        st = te.compute(outer, lambda *i: te.sum(e(*i, whole + k2t), axis=k2t), name=BLOCKS[2] + "_tail")
        return te.compute(t.shape, lambda *i: e(*i) * (one / (s(*i[:-1]) + st(*i[:-1]))), name=BLOCKS[3])

    if order is None:
        return bb.call_te(softmax, x, primfunc_name_hint="softmax")
    y = bb.emit_te(softmax, x, primfunc_name_hint="softmax")
    back = [order.index(a) for a in range(ndim)]
    return bb.call_te(topi.transpose, y, back, primfunc_name_hint="softmax_axis_back")
