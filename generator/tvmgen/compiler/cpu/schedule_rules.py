"""The default schedules' rules for one fused CPU function (see ``schedules``, which picks the rule):
elementwise / injective functions, reductions along rows (softmax, layer normalisation), the epilogue
folded into a tile, and the helpers every rule uses (loop extents, vector tiles). The reduction rule
(convolutions, matmuls, pooling, depthwise convolutions, whole-tensor reductions) is
``reduction_rules``. Each rule either fits and schedules the function, or raises and leaves it to the
caller (TVM's own lowering).
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np


@dataclass(frozen=True)
class CpuShape:
    """What the schedules need to know of the CPU."""

    vector_bits: int  # 512 AVX-512, 256 AVX2, 128 NEON / SSE
    registers: int  # vector registers available for accumulators

    def lanes(self, dtype_bits: int) -> int:
        return max(1, self.vector_bits // dtype_bits)


def cpu_shape(target) -> CpuShape:
    from tvm.target import codegen

    triple = str(target.attrs.get("mtriple", "")) or codegen.llvm_get_system_triple()
    aarch64 = triple.startswith(("aarch64", "arm64"))
    if triple.startswith(("x86_64", "i686", "i386")):
        # llvm_get_vector_width reports the host's width for any x86 target: ask for the features
        bits = (
            512
            if codegen.target_has_features("avx512f", target)
            else (256 if codegen.target_has_features("avx", target) else 128)
        )
    else:
        bits = int(codegen.llvm_get_vector_width(target)) or 128
    # 32 architectural vector registers with AVX-512 and on AArch64, 16 with AVX2/SSE and ARMv7.
    registers = 32 if bits >= 512 or aarch64 else 16
    return CpuShape(bits, registers)


DATA_PAR, COMM_REDUCE = 0, 2  # tvm IterVar kinds


def iter_kinds(sch, block) -> list[int]:
    return [int(iv.iter_type) for iv in sch.get(block).iter_vars]


def loop_extent(sch, loop) -> int | None:
    ext = sch.get(loop).extent
    return int(ext.value) if hasattr(ext, "value") else None


def known_extent(sch, loop) -> int:
    """The extent of a loop already found constant (by ``_transposed_axis``, ``reduction_rules._is_depthwise``, or
    because it was picked for an extent over 1)."""
    ext = loop_extent(sch, loop)
    assert ext is not None, "a loop picked for its constant extent"
    return ext


_LONG_ROW = 16  # vectors: a loop this long gets a scalar tail, a reduction this long four vectors of partials


def pick_divisor(extent: int, candidates) -> int:
    for c in candidates:
        if c <= extent and extent % c == 0:
            return c
    return 1


def _vector_tile(extent: int, lanes: int, preferred) -> int:
    """The vector tile of an axis of ``extent`` in a copy / elementwise loop: the first of
    ``preferred`` (powers of two) dividing it, unless that is less than a whole vector: then the
    divisor (up to 4 vectors, or 32 values) that fills its vectors best, fewest vectors first. A
    loop of 29 is one ``<29 x float>`` vector to LLVM (two AVX-512 registers, the last partly
    used), where ShuffleNet's 58 channels had no vector at all (its channel-shuffle slices: 0.067
    -> 0.024 ms). Not for register tiles: LLVM keeps no ``<29 x float>`` accumulator in registers
    (a 1x1 convolution so tiled ran at 4 GFLOP/s); convolutions get whole vectors of channels
    from ``conv_layout.pad_conv_output_channels`` instead."""
    best = pick_divisor(extent, preferred)
    if best >= lanes or extent < 4:
        return best

    def fill(d: int) -> float:
        return d / (-(-d // lanes) * lanes)

    better = [d for d in range(2, min(extent, max(4 * lanes, 32)) + 1) if extent % d == 0 and fill(d) > fill(best)]
    return min(better, key=lambda d: (-round(fill(d), 3), -(-d // lanes)), default=best)


def vectorize_loop(sch, loop, lanes: int, preferred, *, tail: bool = False) -> None:
    """Vectorise ``loop`` in tiles of ``_vector_tile``; with ``tail``, a long loop whose tile is not
    whole vectors is partitioned instead: whole vectors, then a scalar tail of fewer than ``lanes``."""
    ext = loop_extent(sch, loop) or 1
    v = _vector_tile(ext, lanes, preferred) if ext >= 4 else 1
    if tail and v % lanes and ext >= _LONG_ROW * lanes:
        # A row of 18,385 probabilities (a CTC head's classes) in vectors of 5 (its best divisor;
        # 6,625 in 25 or 53): LLVM widens ``<5 x float>`` to a whole register, the lanes it cannot
        # use masked out, and splits the loads (a softmax over 40 rows of 18,385: 1.43 -> 0.91 ms
        # at one thread, with the reductions' partials; docs/cpu.md). The partition is the loop's
        # last step: nothing else is scheduled on its two loops afterwards.
        main, _ = sch.loop_partition(loop, [ext - ext % lanes, None])
        _, li = sch.split(main, [None, lanes])
        sch.vectorize(li)
        return
    if v == ext:
        sch.vectorize(loop)
    elif v > 1:
        _, li = sch.split(loop, [None, v])
        sch.vectorize(li)


def schedule_injective(sch, blocks, shape: CpuShape) -> None:
    """Copies and elementwise blocks: each block that writes one of the function's outputs (a
    split writes several) gets a loop nest of its own, the others are inlined into them."""
    outputs = [b for b in blocks if _writes_output(sch, b)] or blocks[-1:]
    names = {sch.get(b).name_hint for b in outputs}
    for b in blocks:
        if sch.get(b).name_hint not in names:
            sch.compute_inline(b)
    for out in outputs:
        _schedule_injective_output(sch, out, shape)


def _reads_per_row(block, buffers) -> bool:
    """Whether ``block`` reads each of ``buffers`` (results of reductions along rows) at its own
    row: indexed by its leading block variables (``sum[i, j]`` in a block over ``i, j, k``)."""
    axes = [iv.var for iv in block.iter_vars]
    for read in block.reads:
        if any(read.source.same_as(b) for b in buffers):
            index = [r.min for r in read.region]
            if len(index) > len(axes) or not all(i.same_as(a) for i, a in zip(index, axes)):
                return False
    return True


def _writes_output(sch, block) -> bool:
    """Whether ``block`` writes a buffer of the function's (not one the function allocates)."""
    allocated = sch.get(sch.get_sblock("root")).alloc_buffers
    return any(not any(w.source.same_as(a) for a in allocated) for w in sch.get(block).writes)


def _contiguous_tail(sch, block, loops, lanes: int) -> int:
    """How many innermost loops of an elementwise ``block`` to fuse into one vector loop: 1, or
    more while the innermost run is shorter than ``lanes`` and every buffer the block reads or
    writes is indexed by exactly those loops in its own innermost axes (or is a scalar), with the
    same extents, so the fused loop walks every buffer contiguously. An NHWC image's 3 channels
    (a full-integer model's input quantisation: vectors of 3 floats, one row at a time) become
    rows x 3 values; a per-channel operand (a bias read at ``c``) keeps them apart."""
    b = sch.get(block)
    axes = [iv.var for iv in b.iter_vars]
    if len(axes) != len(loops):
        return 1
    known = [loop_extent(sch, lp) for lp in loops]
    # one loop per block axis, in order (as a function is before it is scheduled)
    if any(e is None or getattr(iv.dom.extent, "value", None) != e for e, iv in zip(known, b.iter_vars)):
        return 1
    extents = [int(e or 0) for e in known]
    tail, run = 1, extents[-1]
    while tail < len(loops) and run < lanes:
        j = tail + 1
        for access in [*b.reads, *b.writes]:
            region = access.region
            if len(region) == 0:
                continue  # a scalar
            if len(region) < j or any(getattr(r.extent, "value", 0) != 1 for r in region):
                return tail
            index = [r.min for r in region[-j:]]
            dims = [getattr(d, "value", None) for d in access.source.shape[-j:]]
            if not all(i.same_as(a) for i, a in zip(index, axes[-j:])) or dims[1:] != extents[-j + 1 :]:
                return tail
        tail, run = j, run * extents[-j]
    return tail


def _schedule_injective_output(sch, out, shape: CpuShape) -> None:
    loops = sch.get_loops(out)
    if not loops:
        return
    lanes = shape.lanes(dtype_bits(sch, out))
    tail = _contiguous_tail(sch, out, loops, lanes) if (loop_extent(sch, loops[-1]) or lanes) < lanes else 1
    if tail > 1:
        loops = [*loops[:-tail], sch.fuse(*loops[-tail:])]
    inner = loop_extent(sch, loops[-1]) or 1
    vec = _vector_tile(inner, lanes, [lanes * 2, lanes, lanes // 2, lanes // 4]) if inner >= 4 else inner
    across = _transposed_axis(sch, out, loops)
    if across is not None:
        # A transpose (NHWC -> NCHW output): the output's rows are read across the input's, one
        # value per input cache line. Row by row, every task read all of the input (64 x 111 x
        # 111 floats: 4.8 ms). In blocks of lanes x lanes values, each input line is read once
        # and used for a whole block of rows.
        a_ext = known_extent(sch, loops[across])
        a_o, a_i = sch.split(loops[across], [None, pick_divisor(a_ext, [lanes, lanes // 2, lanes // 4, 2])])
        vec = pick_divisor(inner, [lanes, lanes // 2, lanes // 4])
        if vec < 4:
            vec = _vector_tile(inner, lanes, [lanes, lanes // 2, lanes // 4])
        w_o, w_i = sch.split(loops[-1], [None, vec])
        outer = [a_o if i == across else lp for i, lp in enumerate(loops[:-1])] + [w_o]
        sch.reorder(*outer, a_i, w_i)
        sch.vectorize(w_i)
    elif vec > 1:
        *outer, last = loops
        if vec < inner:
            lo, li = sch.split(last, [None, vec])
            outer = [*outer, lo]
        else:
            li = last
        sch.vectorize(li)
    else:
        outer = loops
    if not outer:
        return
    # A task is a slice of the outer loops, not one vector: enough tasks to share out, few enough
    # that each does real work (one task per element: an input transpose took 0.072 ms, not 0.027).
    at, tasks = 0, 1
    while at < len(outer) and tasks < _INJECTIVE_TASKS:
        tasks *= loop_extent(sch, outer[at]) or _INJECTIVE_TASKS
        at += 1
    fused = sch.fuse(*outer[:at]) if at > 1 else outer[0]
    sch.parallel(fused)


_INJECTIVE_TASKS = 64


def schedule_rows(sch, shape: CpuShape) -> None:
    """Several reductions along the rows of the output (softmax: the row maximum, then the sum of
    exponentials; layer normalisation: the mean, then the variance): rows in parallel, each row's
    steps in turn inside its task while the row is in cache, the element loops in vectors.

    A block that both reads a reduction's result and feeds another (softmax's exponentials,
    layer normalisation's mean) is computed per row; elementwise producers (a scale, a mask, a
    residual add) and consumers are inlined. Each reduction over a row of whole vectors (or half
    or quarter vectors: rows of 1000) is computed as a vector of partial results combined at the
    end: a scalar loop is a chain of dependent additions (4 cycles each), vectors do ``lanes`` at
    a time."""
    blocks = sch.get_child_blocks(sch.get_sblock("root"))
    reductions = {sch.get(b).name_hint for b in blocks if COMM_REDUCE in iter_kinds(sch, b)}
    if not reductions:
        raise schedule_error("rows: no reduction")
    *rest, out = blocks
    if sch.get(out).name_hint in reductions:
        raise schedule_error("rows: the output is a reduction")
    lanes = shape.lanes(dtype_bits(sch, out))
    after_reduction: set[str] = set()  # blocks that depend on a reduction's result
    for b in blocks:
        name = sch.get(b).name_hint
        if name in reductions or any(sch.get(p).name_hint in after_reduction for p in sch.get_producers(b)):
            after_reduction.add(name)
    for b in rest:
        name = sch.get(b).name_hint
        feeds_reduction = any(sch.get(c).name_hint in reductions for c in sch.get_consumers(b))
        if name not in reductions and not (name in after_reduction and feeds_reduction):
            sch.compute_inline(b)
    kept = sch.get_child_blocks(sch.get_sblock("root"))
    results = [w.source for b in kept if sch.get(b).name_hint in reductions for w in sch.get(b).writes]
    if not all(_reads_per_row(sch.get(b), results) for b in kept):
        raise schedule_error("rows: a reduction's result read across rows (a reduction over another axis)")
    partials = []
    for b in kept:
        if sch.get(b).name_hint in reductions:
            k = sch.get_loops(b)[-1]
            extent = loop_extent(sch, k) or 0
            # rows of 1000 (a classifier's softmax): 8 partial results, not a scalar chain. A row no
            # vector divides (a CTC head's 6625 classes) gets the divisor that fills its vectors best
            # (53: four AVX-512 registers, the last partly used; ``_vector_tile``): its scalar chains
            # of 6625 maxima, then sums, took 3.6x the time of a row of 6640.
            # Long rows (a CTC head's 18,400 classes) get four vectors of partial results: one
            # vector is one chain of dependent maxima / sums, a vector every 3 cycles (Zen 2's
            # latency), where four chains keep pace with the loads (a softmax over 40 x 18,400:
            # 0.72 -> 0.65 ms at one thread).
            wide = [p for p in (4 * lanes, 2 * lanes) if extent >= _LONG_ROW * p]
            part = pick_divisor(extent, [*wide, lanes, lanes // 2, lanes // 4])
            if part < 4:
                part = _vector_tile(extent, lanes, [lanes, lanes // 2, lanes // 4])
            if part >= 4 and extent >= 2 * part:
                _, ki = sch.split(k, [None, part])
                partials.append(sch.rfactor(ki, len(sch.get_loops(b)) - 2))
    *outer, _ = sch.get_loops(out)
    if not outer:
        raise schedule_error("rows: a single row, nothing to parallelise")
    row = sch.fuse(*outer) if len(outer) > 1 else outer[0]
    sch.parallel(row)
    *steps, out = sch.get_child_blocks(sch.get_sblock("root"))
    for b in reversed(steps):  # consumers first: each is computed at the row before its producers
        sch.compute_at(b, row, preserve_unit_loops=False)
    for rf in partials:  # the partial results' loops: [lanes (spatial), k / lanes], lanes innermost
        ki, ko = sch.get_loops(rf)[-2:]
        sch.reorder(ko, ki)
        sch.vectorize(ki)
    skip = reductions | {sch.get(rf).name_hint for rf in partials}
    for b in [*steps, out]:
        if sch.get(b).name_hint in skip:
            continue
        loops = sch.get_loops(b)
        if len(loops) > 1:  # an element loop inside the row's
            vectorize_loop(sch, loops[-1], lanes, [lanes, lanes // 2, lanes // 4], tail=True)


def _transposed_axis(sch, block, loops) -> int | None:
    """The output axis a transpose reads along the input's innermost dimension, when the output's
    innermost axis is read across the input's rows instead; None for anything else (an axis under
    4, a binding that is not one loop per axis)."""
    b = sch.get(block)
    axes = [iv.var for iv in b.iter_vars]
    if len(axes) != len(loops) or len(axes) < 2 or (loop_extent(sch, loops[-1]) or 0) < 4:
        return None
    for read in b.reads:
        index = [r.min for r in read.region]
        if not index or any(getattr(r.extent, "value", 0) != 1 for r in read.region):  # one element per read
            continue
        last = index[-1]
        hit = next((i for i, a in enumerate(axes[:-1]) if last.same_as(a)), None)
        if (
            hit is not None
            and any(x.same_as(axes[-1]) for x in index[:-1])
            and (loop_extent(sch, loops[hit]) or 0) >= 4
        ):
            return hit
    return None


def constant_weights(sch) -> bool:
    """Whether the scheduled function reads constant weights (``layout_free_buffers``, marked by
    ``schedules.packed_weights_passes``): they are packed at compile time in the order its loops read them."""
    attrs = sch.mod["main"].attrs
    return bool(attrs and attrs.get("layout_free_buffers"))


def dtype_bits(sch, block) -> int:
    return int(sch.get(block).writes[0].source.dtype.bits)


def fold_epilogue(sch, acc, shape: CpuShape, guarded_at=None):
    """Fold the epilogue (bias, activation) into the write-back of the tile ``acc``; the block that
    writes the tile's results out (``acc``, or the consumer that took its place).

    ``guarded_at``: the loop ``acc`` was computed at when the tile is guarded (its last tile partial:
    ``acc`` has a predicate). A consumer that slices the tile (padded channels back to the model's: 16 of
    them written as 12) is not inlined into it then: TVM's reverse_compute_inline gives the block the
    slice's predicate in place of its own, and the partial tile was written past the end of the output (a
    13-pixel row in tiles of 5: pixels 13 and 14, and a heap corrupted). Such a consumer is computed at
    ``guarded_at`` itself, where TVM derives its predicate from both bounds, and ``acc`` inlined into it.

    An activation that reads its input twice (SiLU / swish ``x * sigmoid(x)``, GELU, hard-swish) is
    a diamond: the value has two consumers, one of them (``sigmoid(x)``) feeding the other. Such a
    branch is inlined into its consumer first, leaving one elementwise consumer to fold; left as
    it was, the whole activation ran as TVM lowers it (one thread, no vectors): EfficientNet-B0's
    first expanding 1x1 convolution took 3.9 ms, 0.6 of it the convolution."""
    while True:
        consumers = sch.get_consumers(acc)
        if len(consumers) > 1:
            inlined = False
            for c in consumers:
                if sch.get_consumers(c):  # an intermediate, not the function's output
                    inlined = try_(sch.compute_inline, c) or inlined
            consumers = sch.get_consumers(acc)
            if len(consumers) > 1 and inlined:  # hard-swish x * relu6(x + 3) * (1/6): two rounds
                continue
        if len(consumers) != 1:
            break
        if guarded_at is not None and _narrower(sch, consumers[0], acc):
            sch.reverse_compute_at(consumers[0], guarded_at)
            sch.compute_inline(acc)
            acc = consumers[0]
            continue
        if not try_(sch.reverse_compute_inline, consumers[0]):  # not elementwise: a separate pass
            schedule_injective(sch, [consumers[0]], shape)
            break
    return acc


def _narrower(sch, consumer, producer) -> bool:
    """Whether ``consumer`` covers fewer elements than ``producer`` writes (a slice of it)."""

    def size(block) -> int:
        return int(np.prod([int(getattr(iv.dom.extent, "value", 0)) for iv in sch.get(block).iter_vars]))

    return size(consumer) < size(producer)


def vectorize_innermost(sch, block, lanes: int) -> None:
    vectorize_loop(sch, sch.get_loops(block)[-1], lanes, [lanes, lanes // 2, lanes // 4])


def try_(primitive, *args, **kwargs) -> bool:
    """Apply a schedule primitive that may not fit; whether it did. (A failed primitive leaves the
    schedule as it was.)"""
    try:
        primitive(*args, **kwargs)
        return True
    except Exception:
        return False


def schedule_error(msg: str):
    from tvm import s_tir

    return s_tir.ScheduleError(msg)
