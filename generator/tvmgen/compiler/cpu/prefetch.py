"""Weight-stationary kernels prefetch the next task's block of weights.

A weight-stationary convolution (``reduction_rules._weight_stationary``: a late stage's 1x1
convolution, 7 x 7 pixels, 192 -> 1152 channels, 884 KB of weights) runs one task per block of
output channels; a task reads its block of weights (192 x 32 floats, 24 KB) from memory during
its first row of tiles, then from L1 for the other rows. That first row waits on memory: the
tile does 14 multiply-adds per 128 bytes of weights, faster than one core streams them. The next
block's weights are known, so the rows after the first prefetch them into L2 (``prefetcht1`` on
x86, ``prfm pldl2keep`` on ARM), a share per row, while the tile computes from L1: the next
task's first row then reads from L2.

Fresh builds with and without (AVX-512), interleaved, medians of 5 x 300
runs: MnasNet 6.28 -> 5.97 ms at one thread (its 1152 -> 320 convolution 318 -> 275 us, 320 -> 1280
365 -> 318 us), 3.37 -> 3.26 ms at two; EfficientNet-B0 10.38 -> 9.92 ms and 5.61 -> 5.47 ms;
MobileNetV2 and ResNet-18 unchanged within the noise.

A task whose block is run in chunks of input channels (``reduction_rules._weight_chunk``: a 3x3
convolution, 7 x 7 pixels, 512 -> 512, 9.4 MB of weights) reads each chunk (18 KB) from memory in
its first row and from L1 in the other six; its rows after the first prefetch the next chunk into
L1 (``prefetcht0`` / ``prfm pldl1keep``; a chunk is sized so two fit a 48 KB L1), the next task's
first chunk after the task's last. ResNet-18 on one thread (AVX-512, 48 KB L1),
medians of interleaved rounds: 16.7 ms without, 15.8 prefetching into L2, 15.1 into L1 (its last
stage's 3x3 convolutions about 180 GFLOP/s, see ``docs/cpu.md``).

A product with constant weights over several tiles of rows (a CTC head: 40 rows x 18,400 classes, 8.8 MB
of weights, a 2.9 MB output) runs a task per block of columns, its tiles of rows a serial loop
(``reduction_rules``). Beyond the caches it waited on two streams: the block's weights in its first
tile, and each output line's read for ownership when a tile stored it. Its tiles after the first
prefetch the next block's weights (as above), and every tile prefetches for writing (``prefetchw`` /
``prfm pstl1keep``) the lines the next block's same tile will write (``NEXT_OUTPUT``, its value the
tile's columns): 40 x 120 x 18,400 at one thread (Zen 2) 2.6 -> 2.0 ms; either prefetch alone gained
under 0.1 ms (a C model of the kernel, caches flushed between runs, agreed).

A convolution of a short reduction over a large output (1x1, 16 -> 96 channels over 112 x 112 pixels, a 4.8 MB
output) stores faster than memory hands it the lines. Each register tile prefetches for writing the lines its
block of channels has one tile of pixels further on in the flat output (``AHEAD_OUTPUT`` on the tile loop, its
value the tile's columns): MobileNetV2's such convolution 0.91 -> 0.71 ms at one thread (Zen 2).

The schedule marks the task's row loop (``ANNOTATION``, its value the axes that index a block: 1,
the task; 2, the task and the chunk) and the chunk loop (``CHUNKS``); ``PrefetchNextWeights`` runs
after the weights are packed (``schedules.fold_packed_weights_passes``), when the packed weights are
a parameter whose leading axes are the task (and chunk), and adds the prefetches there, each one
address into the weights seen flat. A kernel whose weights were
not packed (weights passed at run time) gets none. A prefetch is a hint: it cannot fault or change
a result, and its address is kept inside the buffer all the same.
"""

from __future__ import annotations

import numpy as np

ANNOTATION = "tvmgen.prefetch_next_weights"  # value: the axes of a block (1: task, 2: task, chunk)
NEXT_OUTPUT = "tvmgen.prefetch_next_output"  # on a task's row loop: each row prefetches what the next task's writes
AHEAD_OUTPUT = "tvmgen.prefetch_ahead_output"  # on a tile loop: each tile prefetches what the next tile of rows writes
CHUNKS = "tvmgen.weight_chunks"  # the loop over a task's chunks of weights
_LINE_BYTES = 64  # a cache line on the x86 and ARM cores tvmgen targets
_TO_L2 = 2  # llvm.prefetch locality 2: prefetcht1 / prfm pldl2keep
_TO_L1 = 3  # locality 3: prefetcht0 / prfm pldl1keep


def PrefetchNextWeights():  # noqa: N802 - a pass, named like TVM's
    import tvm
    from tvm import tirx

    @tvm.transform.module_pass(opt_level=0, name="TvmgenPrefetchNextWeights")
    def _pass(mod, _ctx):
        for gv, f in list(mod.functions.items()):
            if isinstance(f, tirx.PrimFunc):
                new = _with_prefetches(f)
                if not new.same_as(f):
                    mod[gv] = new
        return mod

    return _pass


def _with_prefetches(func):
    """``func`` with, in each marked row loop inside a parallel task loop, the prefetches of the
    next block of weights: rows 1 .. n-1 each prefetch 1 / (n - 1) of the block's cache lines.
    A block is the task's (the packed weights' first axis), or, in a loop marked ``CHUNKS``, the
    task's chunk (the first two axes); the next block follows it in the packed weights, the
    next task's first chunk after a task's last."""
    import tvm_ffi
    from tvm import tirx

    weights = [p for p in func.params if len(getattr(getattr(p, "ty", None), "shape", ())) >= 2]

    def leading(w, n: int) -> list[int] | None:
        dims = w.ty.shape[:n]
        return [int(d) for d in dims] if all(isinstance(d, tirx.IntImm) for d in dims) else None

    def prefetch_in(rows, axes: list):
        """``rows`` with its prefetches, its block indexed by ``axes`` ((loop variable, extent), outermost first)."""
        extents = [e for _, e in axes]
        blocks = [w for w in weights if len(w.ty.shape) > len(axes) and leading(w, len(axes)) == extents]
        if int(rows.annotations[ANNOTATION]) != len(axes) or int(rows.extent) < 2 or not blocks:
            return rows
        w = max(blocks, key=lambda b: int(np.prod([int(d) for d in b.ty.shape])))  # not the bias
        dims = [int(d) for d in w.ty.shape[len(axes) :]]
        per_block = int(np.prod(dims))
        per_line = _LINE_BYTES * 8 // tvm_ffi.dtype(str(w.ty.dtype)).bits
        per_row = _ceil_div(_ceil_div(per_block, per_line), int(rows.extent) - 1)  # lines each row prefetches
        r = rows.loop_var
        dtype = r.ty.dtype
        block = axes[0][0]
        for var, extent in axes[1:]:
            block = block * extent + var
        following = block + 1  # the next block, its place in the packed weights' blocks
        line = tirx.Var("line", dtype)
        offset = tirx.min(((r - 1) * per_row + line) * per_line, per_block - 1)
        # a chunk (sized to fit L1 with room for the next) into L1; a task's block (up to 150 KB) into L2
        flat, hint = _flat_prefetch(w, "flat", following * per_block + offset, 0, _TO_L1 if len(axes) > 1 else _TO_L2)
        loop = tirx.For(line, tirx.const(0, dtype), tirx.const(per_row, dtype), tirx.ForKind.SERIAL, hint)
        first = tirx.IfThenElse(tirx.all(r >= 1, following < int(np.prod(extents))), loop, None)
        return _with_body(rows, tirx.SeqStmt([flat, first, rows.body]))

    def rows_under(axes: list):
        def visit(loop):
            if CHUNKS in loop.annotations:  # its rows: the chunk's block, one more axis
                inner = [*axes, (loop.loop_var, int(loop.extent))]
                return _with_body(loop, tvm_ffi.structural_map(loop.body, [(tirx.For, rows_under(inner))]))
            if NEXT_OUTPUT in loop.annotations:
                loop = _with_next_output(func, loop, *axes[0])
            if AHEAD_OUTPUT in loop.annotations:
                loop = _with_ahead_output(func, loop)
            return prefetch_in(loop, axes) if ANNOTATION in loop.annotations else loop

        return visit

    def task_loop(loop):
        if loop.kind != tirx.ForKind.PARALLEL:
            return loop
        visit = rows_under([(loop.loop_var, int(loop.extent))])
        body = tvm_ffi.structural_map(loop.body, [(tirx.For, visit)])
        return loop if body.same_as(loop.body) else _with_body(loop, body)

    return tvm_ffi.structural_map(func, [(tirx.For, task_loop)])


def _with_body(loop, body):
    from tvm import tirx

    return tirx.For(loop.loop_var, loop.min, loop.extent, loop.kind, body, loop.thread_binding, loop.annotations)


def _flat_prefetch(buf, suffix: str, index, write: int, locality: int) -> tuple:
    """(the declaration of ``buf`` seen flat, the same data: one address computation per line, no indices;
    a prefetch of its element ``index``, for writing if ``write``, to ``locality``)."""
    from tvm import tirx

    size = int(np.prod([int(d) for d in buf.ty.shape]))
    flat = tirx.decl_buffer((size,), buf.ty.dtype, f"{buf.name}_{suffix}", data=buf.data)
    address = tirx.address_of(tirx.BufferLoad(flat, [index]))
    hint = tirx.Evaluate(tirx.call_intrin("void", "tirx.prefetch", address, write, locality, 1))
    return tirx.DeclBuffer(flat, data=buf.data), hint


def _ceil_div(a: int, b: int) -> int:
    return -(-a // b)


def _with_next_output(func, rows, task, tasks: int):
    """``rows`` (a task's loop over its tiles of rows) with, first in each iteration, a prefetch for writing
    of each output cache line the next task's same tile writes: the lines are owned when that tile
    stores them, not read for ownership then. The tile's write-back is the block in ``rows`` that
    writes one of ``func``'s parameters; its loops over the output's rows make the prefetches' loops,
    and its columns (the loops that index the last axis, ``columns`` values from where they start)
    one prefetch per cache line."""
    from tvm import tirx

    written = _written_lines(func, rows, int(rows.annotations[NEXT_OUTPUT]))
    if written is None:
        return rows
    index, _, _, _, flatten, prefetches = written
    flat, stmt = prefetches(flatten([_substituted(i, [(task, task + 1)]) for i in index]))
    first = tirx.IfThenElse(task + 1 < tasks, stmt, None)
    return _with_body(rows, tirx.SeqStmt([flat, first, rows.body]))


def _with_ahead_output(func, tile):
    """``tile`` (the loop whose each iteration is one register tile, its write-back inside) with, first in
    each iteration, a prefetch for writing of each output cache line the same tile one tile of rows on
    writes: for an NHWC convolution of a short reduction, the next tile of pixels (in the flat output, past
    an image row's end the next row's first pixels). Its rows are one loop indexing one axis of the output;
    else ``tile`` is left as it is."""
    from tvm import tirx

    written = _written_lines(func, tile, int(tile.annotations[AHEAD_OUTPUT]))
    if written is None:
        return tile
    index, shape, over, fresh, flatten, prefetches = written
    if len(over) != 1:
        return tile
    axes = [d for d, i in enumerate(index) if _uses(i, fresh[0][1])]
    if len(axes) != 1:
        return tile
    ahead = int(over[0].extent) * int(np.prod(shape[axes[0] + 1 :]))  # one tile of rows, in flat elements
    flat, stmt = prefetches(flatten(index) + ahead)
    return _with_body(tile, tirx.SeqStmt([flat, stmt, tile.body]))


def _write_back(func, loop):
    """(the loops inside ``loop`` around it, its realize, the region it writes) of the first block in
    ``loop`` that writes one of ``func``'s parameters (a tile's write-back), or None."""
    from tvm import s_tir, tirx

    found: list[tuple] = []

    def walk(stmt, loops):
        if found or stmt is None:
            return
        if isinstance(stmt, tirx.For):
            walk(stmt.body, [*loops, stmt])
        elif isinstance(stmt, tirx.SeqStmt):
            for s in stmt.seq:
                walk(s, loops)
        elif isinstance(stmt, s_tir.SBlockRealize):
            written = [w for w in stmt.block.writes if any(w.source.same_as(p) for p in func.params)]
            if written:
                found.append((loops, stmt, written[0]))
            else:
                walk(stmt.block.body, loops)
        elif isinstance(stmt, tirx.IfThenElse):
            walk(stmt.then_case, loops)
            walk(stmt.else_case, loops)
        elif hasattr(stmt, "body"):
            walk(stmt.body, loops)

    walk(loop.body, [])
    return found[0] if found else None


def _written_lines(func, loop, columns: int):
    """For the write-back in ``loop`` (``_write_back``): (its region's start, each loop variable over the
    tile's rows replaced by a fresh one; the output's shape; those row loops; (old, fresh) variables; a function from an index
    to its flat form; a function from a flat index to (the output seen flat, the loops prefetching for
    writing into L1 each line of ``columns`` values from there, for each row)), or None."""
    import tvm_ffi
    from tvm import tirx
    from tvm.sym.analyzer import Analyzer

    found = _write_back(func, loop)
    if found is None:
        return None
    loops, realize, write = found
    out = write.source
    per_line = _LINE_BYTES * 8 // tvm_ffi.dtype(str(out.ty.dtype)).bits
    bound = [(iv.var, v) for iv, v in zip(realize.block.iter_vars, realize.iter_values)]
    index = [_substituted(r.min, bound) for r in write.region]
    along = [lp for lp in loops if _uses(index[-1], lp.loop_var)]  # the tile's columns
    over = [lp for lp in loops if not any(lp.same_as(a) for a in along)]  # its rows
    fresh = [(lp.loop_var, tirx.Var(lp.loop_var.name + "_next", lp.loop_var.ty.dtype)) for lp in over]
    index = [_substituted(i, [*fresh, *[(lp.loop_var, lp.min) for lp in along]]) for i in index]
    shape = [int(d) for d in out.ty.shape]
    total = int(np.prod(shape))
    line = tirx.Var("line", loop.loop_var.ty.dtype)

    def flatten(idx):
        flat_index = idx[0]
        for i, d in zip(idx[1:], shape[1:]):
            flat_index = flat_index * d + i
        return flat_index

    def prefetches(flat_index):
        start = Analyzer().simplify(flat_index + line * per_line)
        flat, stmt = _flat_prefetch(out, "next_flat", tirx.min(start, total - 1), 1, _TO_L1)
        stmt = tirx.For(
            line,
            tirx.const(0, line.ty.dtype),
            tirx.const(_ceil_div(columns, per_line), line.ty.dtype),
            tirx.ForKind.SERIAL,
            stmt,
        )
        for lp, (_, new) in reversed(list(zip(over, fresh))):
            stmt = tirx.For(new, lp.min, lp.extent, tirx.ForKind.SERIAL, stmt)
        return flat, stmt

    return index, shape, over, fresh, flatten, prefetches


def _substituted(expr, value):
    import tvm_ffi
    from tvm import tirx

    return tvm_ffi.structural_map(expr, [(tirx.Var, lambda v: next((x for k, x in value if k.same_as(v)), v))])


def _uses(expr, var) -> bool:
    import tvm_ffi
    from tvm import tirx

    hits: list[bool] = []

    def seen(v):
        hits.append(v.same_as(var))
        return v

    tvm_ffi.structural_map(expr, [(tirx.Var, seen)])
    return any(hits)
