"""The default schedules' rules for one fused CPU function (see ``schedules``, which picks the rule):
elementwise / injective functions, one reduction (convolutions, matmuls, pooling, means) with its
register tile and fused epilogue, depthwise convolutions, whole-tensor reductions. Each rule either
fits and schedules the function, or raises and leaves it to the caller (TVM's own lowering).
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from tvmgen.compiler import prefetch


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


def _extent(sch, loop) -> int | None:
    ext = sch.get(loop).extent
    return int(ext.value) if hasattr(ext, "value") else None


def _known_extent(sch, loop) -> int:
    """The extent of a loop already found constant (by ``_transposed_axis``, ``_is_depthwise``, or
    because it was picked for an extent over 1)."""
    ext = _extent(sch, loop)
    assert ext is not None, "a loop picked for its constant extent"
    return ext


def _pick(extent: int, candidates) -> int:
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
    from ``rewrites.pad_conv_output_channels`` instead."""
    best = _pick(extent, preferred)
    if best >= lanes or extent < 4:
        return best

    def fill(d: int) -> float:
        return d / (-(-d // lanes) * lanes)

    better = [d for d in range(2, min(extent, max(4 * lanes, 32)) + 1) if extent % d == 0 and fill(d) > fill(best)]
    return min(better, key=lambda d: (-round(fill(d), 3), -(-d // lanes)), default=best)


def _vectorize_loop(sch, loop, lanes: int, preferred) -> None:
    """Vectorise ``loop`` in tiles of ``_vector_tile``."""
    ext = _extent(sch, loop) or 1
    v = _vector_tile(ext, lanes, preferred) if ext >= 4 else 1
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
    known = [_extent(sch, lp) for lp in loops]
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
    lanes = shape.lanes(_dtype_bits(sch, out))
    tail = _contiguous_tail(sch, out, loops, lanes) if (_extent(sch, loops[-1]) or lanes) < lanes else 1
    if tail > 1:
        loops = [*loops[:-tail], sch.fuse(*loops[-tail:])]
    inner = _extent(sch, loops[-1]) or 1
    vec = _vector_tile(inner, lanes, [lanes * 2, lanes, lanes // 2, lanes // 4]) if inner >= 4 else inner
    across = _transposed_axis(sch, out, loops)
    if across is not None:
        # A transpose (NHWC -> NCHW output): the output's rows are read across the input's, one
        # value per input cache line. Row by row, every task read all of the input (64 x 111 x
        # 111 floats: 4.8 ms). In blocks of lanes x lanes values, each input line is read once
        # and used for a whole block of rows.
        a_ext = _known_extent(sch, loops[across])
        a_o, a_i = sch.split(loops[across], [None, _pick(a_ext, [lanes, lanes // 2, lanes // 4, 2])])
        vec = _pick(inner, [lanes, lanes // 2, lanes // 4])
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
        tasks *= _extent(sch, outer[at]) or _INJECTIVE_TASKS
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
        raise _schedule_error("rows: no reduction")
    *rest, out = blocks
    if sch.get(out).name_hint in reductions:
        raise _schedule_error("rows: the output is a reduction")
    lanes = shape.lanes(_dtype_bits(sch, out))
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
        raise _schedule_error("rows: a reduction's result read across rows (a reduction over another axis)")
    partials = []
    for b in kept:
        if sch.get(b).name_hint in reductions:
            k = sch.get_loops(b)[-1]
            extent = _extent(sch, k) or 0
            # rows of 1000 (a classifier's softmax): 8 partial results, not a scalar chain
            part = _pick(extent, [lanes, lanes // 2, lanes // 4])
            if part >= 4 and extent >= 2 * part:
                _, ki = sch.split(k, [None, part])
                partials.append(sch.rfactor(ki, len(sch.get_loops(b)) - 2))
    *outer, _ = sch.get_loops(out)
    if not outer:
        raise _schedule_error("rows: a single row, nothing to parallelise")
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
            _vectorize_loop(sch, loops[-1], lanes, [lanes, lanes // 2, lanes // 4])


def _transposed_axis(sch, block, loops) -> int | None:
    """The output axis a transpose reads along the input's innermost dimension, when the output's
    innermost axis is read across the input's rows instead; None for anything else (an axis under
    4, a binding that is not one loop per axis)."""
    b = sch.get(block)
    axes = [iv.var for iv in b.iter_vars]
    if len(axes) != len(loops) or len(axes) < 2 or (_extent(sch, loops[-1]) or 0) < 4:
        return None
    for read in b.reads:
        index = [r.min for r in read.region]
        if not index or any(getattr(r.extent, "value", 0) != 1 for r in read.region):  # one element per read
            continue
        last = index[-1]
        hit = next((i for i, a in enumerate(axes[:-1]) if last.same_as(a)), None)
        if hit is not None and any(x.same_as(axes[-1]) for x in index[:-1]) and (_extent(sch, loops[hit]) or 0) >= 4:
            return hit
    return None


def _dtype_bits(sch, block) -> int:
    return int(sch.get(block).writes[0].source.dtype.bits)


def schedule_reduction(sch, block, shape: CpuShape, depthwise_rule: bool = True) -> None:
    # Producers that only copy (1x1 convolution "padding", reshapes) are inlined; real padding is
    # computed per parallel task below (inlined, its bounds checks would sit in the inner loop).
    # A pooling's padding is inlined too: see _is_pool.
    padding = []
    pool = _is_pool(sch, block)
    for p in sch.get_producers(block):
        if pool or "if_then_else" not in str(sch.get(p).body):
            sch.compute_inline(p)
        else:
            padding.append(p)

    kinds = iter_kinds(sch, block)
    loops = sch.get_loops(block)
    if len(loops) != len(kinds):
        raise _schedule_error("loops do not map one-to-one to block axes")
    spatial = [lp for lp, k in zip(loops, kinds) if k == DATA_PAR]
    reduce = [lp for lp, k in zip(loops, kinds) if k == COMM_REDUCE]
    if not spatial:
        return _schedule_full_reduction(sch, block, reduce, shape)

    lanes = shape.lanes(_dtype_bits(sch, block))
    if depthwise_rule and _is_depthwise(sch, spatial, reduce):
        return _schedule_depthwise(sch, block, padding, spatial, reduce, shape)
    vec_ext = _extent(sch, spatial[-1]) or 1
    spatial_extents = [_extent(sch, lp) or 1 for lp in spatial]
    rows_loop = next((lp for lp in reversed(spatial[:-1]) if (_extent(sch, lp) or 1) > 1), None)
    vec = _pick(vec_ext, [lanes * 2, lanes, lanes // 2, lanes // 4, 2])
    vectors = max(1, vec // lanes)
    budget = max(1, (shape.registers - 4) // vectors)  # accumulators, plus a few for operands
    # the loops outside the row loop: a band of rows is a task, unless the weights stay put
    has_band = rows_loop is not None and any(
        (_extent(sch, lp) or 1) > 1
        for lp in spatial[: next(i for i, lp in enumerate(spatial) if lp.same_as(rows_loop))]
    )
    stationary = has_band and _weight_stationary(sch, spatial_extents, reduce, block, vec)
    windowed = not pool and int(np.prod([_extent(sch, lp) or 1 for lp in reduce[:-1]])) > 1  # 3x3, not 1x1
    # Up to 8 rows per tile, 14 for a convolution with a window (3x3: 28 accumulators of two
    # vectors with 32 registers, 6 with AVX2's 16); all the registers hold when the weights stay
    # put (see there). 1x1 convolutions, matmuls and pooling keep 8 (not measured faster). A
    # weight-stationary 3x3 convolution keeps two vectors too: its tile of 7 rows x 4 vectors (28
    # accumulators, 4 weight vectors and a broadcast input: 33 of 32 registers) spilled two
    # accumulators to the stack at every step (ResNet-18's last stage: 110 GFLOP/s; 7 x 2: 187).
    across = 1
    if rows_loop is not None and vectors == 1 and vec == lanes and not stationary:
        # An odd number of vectors of channels (144 = 9 x 16, 48 = 3 x 16): a tile of rows x one
        # vector loads one weight vector and one input value per multiply-add. Rows x 3 (5, 7)
        # vectors, the vectors a loop of their own (one vector of 48 floats LLVM scalarised), load
        # a third as much: MobileNetV2's 1x1 24 -> 144 at 56 x 56, 0.217 -> 0.180 ms; MnasNet's
        # 16 -> 48 at 112 x 112, 0.208 -> 0.187 ms (one thread, medians of 3 x 300 runs).
        across = _pick(vec_ext // vec, [3, 5, 7])
        budget = max(1, (shape.registers - 4) // across)
    most = budget if stationary else min(_MAX_ROWS if windowed and reduce else 8, budget)
    rows = _rows(_known_extent(sch, rows_loop), most, budget) if rows_loop is not None else 1

    wide = 1
    if rows_loop is None and vectors == 1:
        # A matrix-vector product (a classifier's dense layer): no rows to tile, so the tile is
        # several vectors of one row, and each task streams contiguous runs of the weights.
        wide = _pick(vec_ext // vec, list(range(budget, 1, -1)))
    if wide > 1 or across > 1:
        v_o, v_u, v_i = sch.split(spatial[-1], [None, max(wide, across), vec])
        outer, inner = list(spatial[:-1]), [v_u, v_i]
    else:
        v_o, v_i = sch.split(spatial[-1], [None, vec])
        outer, inner = list(spatial[:-1]), [v_i]
    if rows > 1:
        r_o, r_i = sch.split(rows_loop, [None, rows])
        # the row tile's outer part stays where the row loop was
        outer = [r_o if lp.same_as(rows_loop) else lp for lp in outer]
        inner = [r_i, *inner]
    # Convolutions run in bands of output rows: a parallel task is a band of tiles, not one tile
    # (fewer, larger tasks measured faster), and pads the input rows its band reads while they
    # are in cache (the overlap with the next band is small). Without a band axis (matmul, dense),
    # a task is one tile and pads what it reads.
    rows_at = next((i for i, lp in enumerate(spatial) if rows_loop is not None and lp.same_as(rows_loop)), len(outer))
    band = next((lp for lp in reversed(outer[:rows_at]) if (_extent(sch, lp) or 1) > 1), None)

    chunk = prefetching = None
    if band is not None and stationary:
        # More weights than activations (the last stages of a CNN, a classifier convolution): a
        # task is a block of output channels over every pixel, so each weight is read from memory
        # once, not once per band of rows; the padded input (small) is made once, before.
        task, serial = [v_o], outer
        for p in padding:
            schedule_injective(sch, [p], shape)
        padding = []
        chunk = _weight_chunk(sch, reduce, vec, _dtype_bits(sch, block))
        rows_of_task = next((lp for lp in serial if (_extent(sch, lp) or 1) > 1), None)
        if chunk is not None:
            # the reduction in chunks whose weights fit L1, each chunk over all the task's pixels
            c_o, c_i = sch.split(reduce[-1], [None, chunk])
            chunk, reduce = c_o, [*reduce[:-1], c_i]
        prefetching = rows_of_task  # its rows after the first fetch the next block's (chunk's) weights
    elif band is not None:
        b_o, b_i = sch.split(band, [None, _band_rows(_known_extent(sch, band))])
        at = outer.index(band)
        task, serial = [*outer[:at], b_o], [b_i, *outer[at + 1 :], v_o]
    else:
        task, serial = [*outer, v_o], []
    sch.reorder(*task, *([chunk] if chunk is not None else []), *serial, *reduce, *inner)
    parallel = sch.fuse(*task) if len(task) > 1 else task[0]
    sch.parallel(parallel)
    tile = serial[-1] if serial else parallel
    _pad_at(sch, padding, parallel, shape, lanes)

    acc = sch.cache_write(block, 0, "local")
    sch.reverse_compute_at(acc, parallel if chunk is not None else tile)
    fold_epilogue(sch, acc, shape)
    wb = sch.get_loops(acc)[1 + (0 if chunk is not None else len(serial)) :]
    if wb:
        _vectorize_loop(sch, wb[-1], lanes, [lanes * 2, lanes, lanes // 2, lanes // 4])
    sch.vectorize(v_i)
    if rows > 1 or wide > 1:  # the tile's rows, or a wide tile's vectors
        sch.unroll(inner[0])
    if across > 1:
        sch.unroll(inner[-2])
    if chunk is not None:
        sch.decompose_reduction(block, chunk)
    elif reduce:  # after vectorize: without its init the block is no longer a "reduction block"
        sch.decompose_reduction(block, reduce[0])
    if prefetching is not None:  # after the init's loops are copied from these
        sch.annotate(prefetching, prefetch.ANNOTATION, 1 if chunk is None else 2)
    if chunk is not None:
        sch.annotate(chunk, prefetch.CHUNKS, 1)


def _is_pool(sch, block) -> bool:
    """A max or average pooling (TOPI's ``pool_max`` / ``pool_sum`` blocks). Its padding is inlined
    into the window loop rather than made as a padded copy: pooling is a pass over its input,
    and the copy was a second pass (SqueezeNet's 3x3 stride-2 max pool of 111 x 111 x 64: 0.21
    -> 0.13 ms). Its bounds checks are cheap beside the loads; a ceil_mode padding no window
    reaches (111 -> 55) costs none, TVM's simplifier proves it from the loop bounds."""
    b = sch.get(block)
    rule = b.annotations.get("schedule_rule")
    return b.name_hint in ("pool_max", "pool_sum") or (rule is not None and "pool" in str(rule))


# Weights from this size up are streamed from memory once per band of output rows (more than a
# core's share of the L2 cache on the CPUs tvmgen targets).
_STATIONARY_WEIGHT_BYTES = 512 * 1024
_STATIONARY_TASKS = 8  # channel blocks enough to share between cores


_MAX_ROWS = 14  # rows of a windowed convolution's register tile, at most (registers permitting)
_L1_WEIGHT_BYTES = 32 * 1024  # a weight-stationary task's chunk of weights, at most


def _weight_chunk(sch, reduce, vec: int, bits: int) -> int | None:
    """Input channels per chunk of a weight-stationary convolution's reduction, or None when the
    task's block of weights (window x input channels x ``vec`` channels) fits L1 already.

    Such a task computes every output pixel of its channel block; with the whole reduction inside
    each tile of rows, it re-read its 590 KB block (ResNet-18's last stage, 3x3x512 x 32 channels)
    from L2 once per output row. In chunks of input channels whose weights fit L1 (16 channels:
    3x3x16 x 32 channels = 18 KB), each chunk runs over all the task's rows (the accumulators of
    the other rows wait in a small local buffer), so each weight comes from memory once and from
    L1 after; the rows after a chunk's first prefetch the next chunk (``compiler.prefetch``). The
    chunk is a power of two dividing the channels.

    1x1 convolutions too: MnasNet's and EfficientNet-B0's last stage (7 x 7 pixels, 1x1 1152 -> 320
    and 320 -> 1280: 147 KB and 41 KB blocks) re-read their block from L2 for each of the 7 rows
    (prefetched there from memory); in chunks of 128 and 64 channels, 176 -> 147 us and 206 -> 158
    us at one thread (AVX-512)."""
    channels = _extent(sch, reduce[-1]) if reduce else None
    window = int(np.prod([_extent(sch, lp) or 1 for lp in reduce[:-1]]))
    per_channel = window * vec * bits // 8
    if not channels or channels * per_channel <= _L1_WEIGHT_BYTES:
        return None
    chunk = 1 << max(0, (_L1_WEIGHT_BYTES // per_channel).bit_length() - 1)
    while chunk > 1 and channels % chunk:
        chunk //= 2
    return chunk if 1 < chunk < channels else None


def _weight_stationary(sch, spatial_extents: list[int], reduce, block, vec: int) -> bool:
    """Whether a convolution's tasks should be blocks of output channels rather than bands of rows:
    its weights (reduction depth x output channels) are large, more output channels than output
    pixels (so more weights than input), and there are enough channel blocks for the cores.
    ResNet-18's last stage (7 x 7 pixels, 3x3x512 -> 512, 9.4 MB of weights) read its weights
    once per output row, 7 times, and ran at 71 GFLOP/s against 160 for the stages before.
    Such a tile reads its block of weights (depth x 2 vectors: 64 KB for 512 input channels, more
    than L1) once per tile of rows, so its tile has as many rows as the registers hold, not 8:
    SqueezeNet's 13 x 13 classifier convolution (512 -> 1000) had tiles of 7 rows, the second
    guarded, and took 1.18 ms; in tiles of 13 rows, 0.85 ms."""
    channels = spatial_extents[-1]
    pixels = int(np.prod(spatial_extents[:-1]))
    depth = int(np.prod([_extent(sch, lp) or 1 for lp in reduce]))
    weight_bytes = depth * channels * _dtype_bits(sch, block) // 8
    return channels > pixels and weight_bytes >= _STATIONARY_WEIGHT_BYTES and channels // vec >= _STATIONARY_TASKS


def _schedule_full_reduction(sch, block, reduce, shape: CpuShape) -> None:
    """A tensor reduced to one value (the max / min a dynamically quantised model takes of each
    activation): ``lanes`` partial results accumulated in a vector (rfactor), then combined."""
    fused = sch.fuse(*reduce) if len(reduce) > 1 else reduce[0]
    lanes = shape.lanes(_dtype_bits(sch, block))
    extent = _extent(sch, fused)
    if extent is None or extent < 2 * lanes or extent % lanes:
        raise _schedule_error("a full reduction of an odd size")
    outer, inner = sch.split(fused, [None, lanes])
    partial = sch.rfactor(inner, 0)  # partial[lane] = reduce over outer; the block combines lanes
    p_outer, p_inner = sch.get_loops(partial)[-2:]
    if not sch.get(p_inner).loop_var.same_as(sch.get(p_outer).loop_var):
        sch.reorder(p_outer, p_inner)
    sch.vectorize(sch.get_loops(partial)[-1])
    init = sch.decompose_reduction(partial, p_outer)  # after vectorize, as in schedule_reduction
    sch.vectorize(sch.get_loops(init)[-1])


def _is_depthwise(sch, spatial, reduce) -> bool:
    """NHWC depthwise convolution: a window (ry, rx) and a channel reduction of one."""
    return (
        len(spatial) == 4
        and len(reduce) == 3
        and _extent(sch, reduce[-1]) == 1
        and all(_extent(sch, lp) is not None for lp in spatial)
    )


# Output pixels in a depthwise tile. Each window row's padded input is copied for the tile (tile
# + window - 1 pixels): the wider the tile, the less of each copy is the overlap (3x3 stride 1:
# 1.5 copied vectors per output vector with 4 pixels, 1.25 with 8; 5x5 stride 2: 2.75 and 2.4).
# 8 is the fastest at one thread on AVX-512 (against 4: MobileNetV2 5.00 -> 4.87 ms, MnasNet
# 5.21 -> 5.00, ShuffleNet 3.37 -> 3.27). 14 is slower than 4: the accumulators, window weights
# and copied input do not fit 32 registers.
_DEPTHWISE_PIXELS = 8


def _schedule_depthwise(sch, block, padding, spatial, reduce, shape: CpuShape) -> None:
    """Depthwise convolution does 9 multiply-adds per output and reads as much as it computes, so
    its tile is small (8 pixels x 1 vector of channels: 8 accumulators, within the 16 registers of
    AVX2 and ARMv7), a task is one output row of one channel vector, and the padded input is made
    per window row, just before the tile reads it (it stays in registers / L1). Measured on the
    builtin model: 0.40 -> 0.23 ms for its nine depthwise convolutions, against 0.37 with the
    convolution tiles."""
    n, h, w, c = spatial
    ry, rx, rc = reduce
    lanes = shape.lanes(_dtype_bits(sch, block))
    vec = _pick(_known_extent(sch, c), [lanes, lanes // 2, lanes // 4])
    c_o, c_i = sch.split(c, [None, vec])
    w_o, w_i = sch.split(w, [None, _rows(_known_extent(sch, w), _DEPTHWISE_PIXELS)])
    sch.reorder(n, h, c_o, w_o, ry, rx, rc, w_i, c_i)
    parallel = sch.fuse(n, h, c_o)
    sch.parallel(parallel)
    _pad_at(sch, padding, ry, shape, lanes)
    acc = sch.cache_write(block, 0, "local")
    sch.reverse_compute_at(acc, w_o)
    fold_epilogue(sch, acc, shape)
    _vectorize_innermost(sch, acc, lanes)
    sch.vectorize(c_i)
    sch.unroll(w_i)
    sch.unroll(ry)
    sch.unroll(rx)
    sch.decompose_reduction(block, ry)


def _pad_at(sch, padding, loop, shape: CpuShape, lanes: int) -> None:
    """Compute each padding block under ``loop`` (just the input it reads), vectorised; padding
    compute_at cannot place gets a parallel pass of its own."""
    for p in padding:
        if try_(sch.compute_at, p, loop, preserve_unit_loops=True):
            _vectorize_innermost(sch, p, lanes)
        else:
            schedule_injective(sch, [p], shape)


def fold_epilogue(sch, acc, shape: CpuShape) -> None:
    """Fold the epilogue (bias, activation) into the write-back of the tile ``acc``.

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
        if not try_(sch.reverse_compute_inline, consumers[0]):  # not elementwise: a separate pass
            schedule_injective(sch, [consumers[0]], shape)
            break


def _band_rows(extent: int) -> int:
    """Output rows per band: the largest divisor of ``extent`` leaving at least 16 tasks (enough
    to balance 2-8 cores), so a band's padded input stays small enough for the L2 cache."""
    return max([d for d in range(1, extent + 1) if extent % d == 0 and extent // d >= min(extent, 16)])


def _vectorize_innermost(sch, block, lanes: int) -> None:
    _vectorize_loop(sch, sch.get_loops(block)[-1], lanes, [lanes, lanes // 2, lanes // 4])


def _rows(extent: int, most: int, budget: int | None = None) -> int:
    """Rows in a register tile: a divisor of ``extent`` from ``most`` down to 4; else one up to
    ``budget`` (the rows the registers hold); else ``extent`` itself when it is at most ``most``;
    else 3 or 2 dividing it; only then the size that wastes least (the last tile partial).

    A partial tile is guarded by a condition TVM adds to every row of the unrolled tile, inside
    the reduction loop, and LLVM then keeps no accumulator in a register: SqueezeNet's first
    convolution (224 -> 111, 3x3 stride 2, 3 -> 64 channels) ran at 52 GFLOP/s in guarded tiles
    of 14 rows and at 129 in tiles of 3; its 1x1 convolutions at 13 x 13 and 27 x 27 now have
    tiles of 13 and 9 rows, not guarded ones of 7. The model: 5.72 -> 4.87 ms at one thread,
    3.15 -> 2.67 ms at two (medians of 5 x 300 runs, fresh builds of both)."""
    exact = _pick(extent, list(range(most, 3, -1)))
    if exact > 1:
        return exact
    if budget is not None and budget > most:
        exact = _pick(extent, list(range(budget, most, -1)))
        if exact > 1:
            return exact
    if extent <= most:
        return extent
    exact = _pick(extent, [3, 2])
    if exact > 1:
        return exact
    return min(range(4, most + 1), key=lambda r: (-(-extent // r) * r - extent, -r))


def try_(primitive, *args, **kwargs) -> bool:
    """Apply a schedule primitive that may not fit; whether it did. (A failed primitive leaves the
    schedule as it was.)"""
    try:
        primitive(*args, **kwargs)
        return True
    except Exception:
        return False


def _schedule_error(msg: str):
    from tvm import s_tir

    return s_tir.ScheduleError(msg)
