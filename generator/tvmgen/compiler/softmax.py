"""Softmax on CPUs: lowered with exp in vectors and one division per row, and scheduled.

TVM lowers ``relax.nn.softmax`` to four loops over the whole tensor (the row maximum, exp, the
row sum, the division) that no default schedule rule fits (two reductions): one thread, no
vectors, and ``exp`` a libm call per element. tvmgen lowers a float32 softmax over the last axis
itself (``legalize_softmax``): ``exp`` written out so it vectorises (``rewrites.vector_exp``), the
row sum inverted once per row and multiplied. ``schedule_softmax`` then makes each row (or block
of rows) a parallel task that computes its maximum, exponentials, sum and output while the row is
in cache, the element loops in vectors. Other softmaxes (another axis, float16) keep TVM's lowering.
"""

from __future__ import annotations

BLOCKS = ("softmax_max", "softmax_exp", "softmax_sum", "softmax_out")


def legalize_softmax(bb, call):
    from tvm import te, tirx, topi

    from tvmgen.compiler.rewrites import vector_exp

    x = call.args[0]
    ndim = len(x.ty.shape.values) if x.ty.shape is not None else 0
    axis = int(call.attrs.axis)
    if str(x.ty.dtype) != "float32" or ndim == 0 or axis not in (-1, ndim - 1):
        return bb.call_te(topi.nn.softmax, x, axis, primfunc_name_hint="softmax")

    def softmax(t):
        *outer, n = t.shape
        k = te.reduce_axis((0, n), "k")
        mx = te.compute(outer, lambda *i: te.max(t(*i, k), axis=k), name=BLOCKS[0])
        e = te.compute(t.shape, lambda *i: vector_exp(t(*i) - mx(*i[:-1])), name=BLOCKS[1])
        k2 = te.reduce_axis((0, n), "k2")
        s = te.compute(outer, lambda *i: te.sum(e(*i, k2), axis=k2), name=BLOCKS[2])
        one = tirx.const(1.0, "float32")
        return te.compute(t.shape, lambda *i: e(*i) * (one / s(*i[:-1])), name=BLOCKS[3])

    return bb.call_te(softmax, x, primfunc_name_hint="softmax")


def is_softmax(sch) -> bool:
    names = {sch.get(b).name_hint for b in sch.get_child_blocks(sch.get_sblock("root"))}
    return all(n in names for n in BLOCKS)


def schedule_softmax(sch, lanes: int) -> None:
    """Rows in parallel (blocks of rows: at least 8 elements a task), each row's four steps in
    turn inside its task, the element loops vectorised. Elementwise producers fused into the
    function (a scale, a mask) are inlined into the row maximum and the exponentials."""
    from tvmgen.compiler.schedule_rules import try_

    root = sch.get_sblock("root")
    named = {sch.get(b).name_hint: b for b in sch.get_child_blocks(root)}
    for name, b in named.items():
        if name not in BLOCKS and not try_(sch.compute_inline, b):
            raise ValueError(f"softmax: cannot inline {name}")
    mx, ex, sm, out = (sch.get_sblock(n) for n in BLOCKS)
    # The row maximum and sum as `lanes` partial results, combined at the end: a scalar loop is a
    # chain of dependent additions (4 cycles each), vectors do `lanes` at a time.
    partials = []
    for b in (sm, mx):
        k = sch.get_loops(b)[-1]
        if int(sch.get(k).extent) % lanes == 0 and int(sch.get(k).extent) >= 2 * lanes:
            _, ki = sch.split(k, [None, lanes])
            partials.append(sch.rfactor(ki, len(sch.get_loops(b)) - 2))
    *outer, k = sch.get_loops(out)
    row = sch.fuse(*outer) if len(outer) > 1 else (outer[0] if outer else None)
    if row is None:
        raise ValueError("softmax: a 1-D softmax, nothing to parallelise")
    sch.parallel(row)
    for b in (sm, *partials[:1], ex, mx, *partials[1:]):  # consumers first: each before its consumer
        sch.compute_at(b, row, preserve_unit_loops=False)
    for rf in partials:  # the partial results' loops: [lanes (spatial), k / lanes], lanes innermost
        ki, ko = sch.get_loops(rf)[-2:]
        sch.reorder(ko, ki)
        sch.vectorize(ki)
    for b in (ex, out):
        last = sch.get_loops(b)[-1]
        extent = int(sch.get(last).extent)
        if extent >= lanes:
            _, vec = sch.split(last, [None, lanes])
            sch.vectorize(vec)
        elif extent > 1:
            sch.vectorize(last)
