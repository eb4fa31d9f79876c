"""The default schedules' rule for a function with one reduction (``schedule_reduction``; see
``schedules``, which picks it): convolutions and matmuls in register tiles with the epilogue folded in,
tasks in bands of output rows or in blocks of output channels (weight-stationary), pooling, depthwise
convolutions and whole-tensor reductions. It either fits and schedules the function, or raises and
leaves it to the caller (TVM's own lowering).
"""

from __future__ import annotations

import math

import numpy as np

from tvmgen.compiler.cpu import prefetch
from tvmgen.compiler.cpu.conv1d import LONG_WINDOW, tile_rows
from tvmgen.compiler.cpu.schedule_rules import (
    COMM_REDUCE,
    DATA_PAR,
    CpuShape,
    constant_weights,
    dtype_bits,
    fold_epilogue,
    iter_kinds,
    known_extent,
    loop_extent,
    pick_divisor,
    schedule_error,
    schedule_injective,
    try_,
    vectorize_innermost,
    vectorize_loop,
)


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
        raise schedule_error("loops do not map one-to-one to block axes")
    spatial = [lp for lp, k in zip(loops, kinds) if k == DATA_PAR]
    reduce = [lp for lp, k in zip(loops, kinds) if k == COMM_REDUCE]
    if not spatial:
        return _schedule_full_reduction(sch, block, reduce, shape)

    lanes = shape.lanes(dtype_bits(sch, block))
    if depthwise_rule and _is_depthwise(sch, spatial, reduce):
        return _schedule_depthwise(sch, block, padding, spatial, reduce, shape)
    row_pixels = pixel_rows = None  # pixels per group of whole image rows, where rows and columns are one loop
    if not pool:
        spatial, row_pixels, pixel_rows = _pixels_as_rows(sch, block, spatial, reduce, shape, lanes)
    vec_ext = loop_extent(sch, spatial[-1]) or 1
    spatial_extents = [loop_extent(sch, lp) or 1 for lp in spatial]
    rows_loop = next((lp for lp in reversed(spatial[:-1]) if (loop_extent(sch, lp) or 1) > 1), None)
    vec = pick_divisor(vec_ext, [lanes * 2, lanes, lanes // 2, lanes // 4, 2])
    vectors = max(1, vec // lanes)
    budget = row_budget(shape, vectors)
    # the loops outside the row loop: a band of rows is a task, unless the weights stay put
    has_band = rows_loop is not None and any(
        (loop_extent(sch, lp) or 1) > 1
        for lp in spatial[: next(i for i, lp in enumerate(spatial) if lp.same_as(rows_loop))]
    )
    # a convolution over one row of pixels (``conv_layout.flatten_stationary_pixels``) is stationary too
    one_row = len(spatial) == 4 and rows_loop is not None and rows_loop.same_as(spatial[2]) and spatial_extents[1] == 1
    stationary = (has_band or row_pixels is not None or one_row) and _weight_stationary(
        sch, spatial_extents, reduce, block, vec
    )
    windowed = not pool and _windowed(sch, reduce)
    wide_head = _wide_head(sch, shape, rows_loop, has_band or windowed or stationary, vec_ext, vec, lanes)
    if wide_head:
        vectors = wide_head_vectors(shape)
        vec = vectors * lanes
        budget = row_budget(shape, vectors)
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
        across = pick_divisor(vec_ext // vec, [3, 5, 7])
        budget = row_budget(shape, across)
    most = budget if stationary else min(_MAX_ROWS if windowed and reduce else 8, budget)
    row_count = known_extent(sch, rows_loop) if rows_loop is not None else 1
    if pixel_rows is not None:  # _pixels_as_rows chose the tile over all the task's pixels
        rows = pixel_rows
    elif rows_loop is not None:
        rows = _rows(row_count, most, budget, _partial_tiles(shape, vectors, across))
    else:
        rows = 1
    guarded = row_count % rows != 0  # the last tile partial
    if guarded and row_pixels is not None and not stationary:  # _pixels_as_rows fuses those for stationary tasks
        raise schedule_error("a partial tile over the pixels of a task that is not weight-stationary")

    wide = 1
    if rows_loop is None and vectors <= 2:
        # A matrix-vector product (a classifier's dense layer): no rows to tile, so the tile is
        # several vectors of one row, and each task streams contiguous runs of the weights. Each
        # accumulator is a chain of multiply-adds, one per step of the reduction: with the two of one
        # pair of vectors, the chain's latency (4-5 cycles), not the two FMA units, set the pace (a
        # streaming keyword spotter's 624 x 64 layer in four tasks of two AVX2 vectors: 4.3 us).
        wide = pick_divisor(vec_ext // vec, list(range(budget, 1, -1)))
    if wide > 1 or across > 1:
        v_o, v_u, v_i = sch.split(spatial[-1], [None, max(wide, across), vec])
        outer, inner = list(spatial[:-1]), [v_u, v_i]
    else:
        v_o, v_i = sch.split(spatial[-1], [None, vec])
        outer, inner = list(spatial[:-1]), [v_i]
    group = None
    if rows > 1:
        r_o, r_i = sch.split(rows_loop, [None, rows])
        # the row tile's outer part stays where the row loop was
        outer = [r_o if lp.same_as(rows_loop) else lp for lp in outer]
        inner = [r_i, *inner]
        if row_pixels is not None and not guarded:
            # tiles of pixels in groups of whole image rows: a group's results are a box of the output
            group, tiles = sch.split(r_o, [None, row_pixels // rows])
            outer = [x for lp in outer for x in ((group, tiles) if lp.same_as(r_o) else (lp,))]
    # Convolutions run in bands of output rows: a parallel task is a band of tiles, not one tile
    # (fewer, larger tasks measured faster), and pads the input rows its band reads while they
    # are in cache (the overlap with the next band is small). Without a band axis (matmul, dense),
    # a task is one tile and pads what it reads.
    rows_at = next((i for i, lp in enumerate(spatial) if rows_loop is not None and lp.same_as(rows_loop)), len(outer))
    band = next((lp for lp in reversed(outer[:rows_at]) if (loop_extent(sch, lp) or 1) > 1), None)

    chunk = prefetching = next_output = ahead_output = None
    # A wide head whose reduction's weights for one tile of columns overflow L1 (a CTC head over
    # 1,024 features: 1,024 x 64 columns, 256 KB) runs as a weight-stationary task too: its block of
    # columns over every row, the reduction in chunks whose weights fit L1, the next chunk
    # prefetched. Each tile of rows re-read its whole 256 KB block from L2: the 64 x 1,024 x 8,256
    # head ran at 72-82 GFLOP/s at one thread, in chunks of 128 at 93-111 (AVX-512); chunks of at most
    # ``_HEAD_CHUNK_DEPTH`` channels on AVX2 too (``_weight_chunk``).
    bits = dtype_bits(sch, block)
    # a stationary task's (or wide head's) chunk; a short pass over a chunk (a task of few pixels, ``_FEW_PIXELS``):
    # the next chunk's prefetch lands while this one is in use, both in L1
    few_pixels = not wide_head and rows * np.prod([loop_extent(sch, lp) or 1 for lp in outer]) <= _FEW_PIXELS
    task_chunk = _weight_chunk(
        sch,
        reduce,
        vec,
        bits,
        most=_HEAD_CHUNK_DEPTH if wide_head else None,
        budget=_L1_WEIGHT_BYTES // 2 if few_pixels else _L1_WEIGHT_BYTES,
    )
    if ((band is not None or row_pixels is not None or one_row) and stationary) or (
        wide_head and task_chunk is not None
    ):
        # More weights than activations (the last stages of a CNN, a classifier convolution): a
        # task is a block of output channels over every pixel, so each weight is read from memory
        # once, not once per band of rows; the padded input (small) is made once, before.
        task, serial = [v_o], outer
        for p in padding:
            schedule_injective(sch, [p], shape)
        padding = []
        # the reduction in chunks whose weights fit L1, each chunk over all the task's pixels
        chunk, reduce = _in_chunks(sch, reduce, task_chunk)
        # the task's rows after the first fetch the next block's (chunk's) weights
        prefetching = _first_loop_over_one(sch, serial)
    elif group is not None:
        # A task is a group of tiles for one block of columns (the block's weights stay in cache for the
        # group's tiles and the next group's), its accumulators written back as the group's box of rows;
        # a window's padded input is made once, before (each group of a block of columns would pad it).
        task, serial = [v_o, *outer[:-1]], outer[-1:]
        for p in padding:
            schedule_injective(sch, [p], shape)
        padding = []
    elif band is not None:
        b_o, b_i = sch.split(band, [None, _band_rows(known_extent(sch, band))])
        at = outer.index(band)
        task, serial = [*outer[:at], b_o], [b_i, *outer[at + 1 :], v_o]
        if rows > 1 and not guarded and _short_reduction(sch, block, reduce):
            # A short reduction over a large output (a 1x1 expansion of 16 channels to 96 at 112 x 112, 4.8 MB)
            # stores faster than memory gives it the lines: each tile prefetches for writing the lines the next
            # tile of pixels writes (``compiler.prefetch``). MobileNetV2's such convolution 0.91 -> 0.71 ms at
            # one thread (Zen 2). Guarded tiles are left alone: with the prefetches' addresses live, LLVM
            # spilled a 5-row tile's accumulators (2x slower).
            ahead_output = v_o
        if not windowed and rows <= _CHUNKED_BAND_ROWS:
            # A short tile re-reads its block of weights from L2 often: 2 rows x 5 vectors (MnasNet's
            # 14 x 14 1x1 480 -> 80, 154 KB a block) took 320 bytes from L2 for 10 multiply-adds, more
            # than L2 gives. Where the block overflows L1, a task is a band of rows for one block of
            # channels, its reduction in L1 chunks over all the band's tiles: 172-221 -> 132-185 us.
            # Taller tiles (8 rows) lost 1-2% so (SqueezeNet, ShuffleNet), as did 3x3 bands (ResNet-18).
            band_chunk = _weight_chunk(sch, reduce, vec * max(wide, across), bits)
            if band_chunk is not None:
                task, serial = [*outer[:at], b_o, v_o], [b_i, *outer[at + 1 :]]
                chunk, reduce = _in_chunks(sch, reduce, band_chunk)
                prefetching = _first_loop_over_one(sch, serial)
    elif constant_weights(sch) and any((loop_extent(sch, lp) or 1) > 1 for lp in outer):
        # A product with constant weights over several tiles of rows (a CTC head: 40-64 rows): the
        # tasks go down the columns first, so a block of weights (K x a tile's columns) is read from
        # memory once and from L1/L2 for the other tiles of rows on the same thread (a parallel loop
        # gives each thread a contiguous run of tasks). Rows first streamed every weight once per
        # tile of rows: 8 times the head's 34 MB for 64 rows in tiles of 8.
        # A task is a block of columns, its tiles of rows a serial loop: each tile of rows after the first
        # fetches a share of the next block's weights, and every tile the lines of the output the next
        # block's same tile writes (``compiler.prefetch``). Beyond the caches (a CTC head's 8.8 MB of
        # weights, its 2.9 MB output) both streams waited on memory: the weights' first tile of each block,
        # each output line's read for ownership (40 x 120 x 18,400: 3.2 ms without, 2.5 with both in a
        # C model of the kernel, caches flushed between runs; either alone gained under 0.1 ms).
        task, serial = [v_o], outer
        prefetching = _first_loop_over_one(sch, serial)
        next_output = prefetching
    else:
        task, serial = [*outer, v_o], []
    sch.reorder(*task, *([chunk] if chunk is not None else []), *serial, *reduce, *inner)
    parallel = sch.fuse(*task) if len(task) > 1 else task[0]
    sch.parallel(parallel)
    tile = serial[-1] if serial else parallel
    _pad_at(sch, padding, parallel, shape, lanes)

    acc = sch.cache_write(block, 0, "local")
    by_task = chunk is not None or row_pixels is not None  # the write-back once per task, not per tile
    at = parallel if by_task else tile
    sch.reverse_compute_at(acc, at)
    acc = fold_epilogue(sch, acc, shape, guarded_at=at if guarded else None)
    wb = sch.get_loops(acc)[1 + (0 if by_task else len(serial)) :]
    if wb:
        vectorize_loop(sch, wb[-1], lanes, [lanes * 2, lanes, lanes // 2, lanes // 4])
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
    if next_output is not None:
        sch.annotate(next_output, prefetch.NEXT_OUTPUT, vec * max(wide, across))  # a tile's columns
    if ahead_output is not None:
        sch.annotate(ahead_output, prefetch.AHEAD_OUTPUT, vec * max(wide, across))


_SHORT_REDUCTION = 64  # multiply-adds per output at most: a tile's stores outpace memory's ownership of their lines
# Outputs from this size up are written with each line prefetched for writing one tile ahead. Measured whole
# (MobileNetV2, one Zen 2 core, both load orders in one process): for its 4.8 MB output alone 3% faster; for every
# output from 512 KB (1.6 and 1.8 MB ones too, their lines still in L3 from the last use) 2% slower.
_AHEAD_OUTPUT_BYTES = 2 * 1024 * 1024


def _short_reduction(sch, block, reduce) -> bool:
    """At most ``_SHORT_REDUCTION`` multiply-adds per output, and an output of ``_AHEAD_OUTPUT_BYTES`` or more."""
    depth = int(np.prod([loop_extent(sch, lp) or _SHORT_REDUCTION + 1 for lp in reduce]))
    out = sch.get(block).writes[0].source
    size = int(np.prod([int(d) for d in out.shape])) * dtype_bits(sch, block) // 8
    return depth <= _SHORT_REDUCTION and size >= _AHEAD_OUTPUT_BYTES


def row_budget(shape: CpuShape, vectors: int) -> int:
    """Rows a register tile of ``vectors`` vectors per row holds: the accumulators, plus a few registers for
    the operands (AVX2's 16 with 2 vectors: 6 rows)."""
    return max(1, (shape.registers - 4) // vectors)


def _pixels_as_rows(sch, block, spatial, reduce, shape: CpuShape, lanes: int) -> tuple[list, int | None, int | None]:
    """(``spatial``, None, None), or, for an NHWC convolution whose register tile is better over the image's
    pixels than over one row of it, (``spatial`` with the output rows and columns fused into one loop of pixels,
    the pixels in a group: whole image rows, and the tile's rows where they are not ``_rows``'s). A tile's
    pixels need not be on one row, each one's input is a broadcast value of its own. With 16 vector registers
    (AVX2: tiles of up to 6 rows x 2 vectors) a width
    with no tile of 5 or 6 rows gets a guarded one (``_rows``): 14 -> 3 tiles of 5, 27 -> 6 tiles of 5.

    - Whole tiles of more rows than a row's tile: a task's tiles end at the end of an image row (a group:
      51 x 2 pixels, 17 tiles of 6), so that its results are a box of the output, written back once per task.
      Tiles of 4 over 14 x 14 pixels ran at 77-80 GFLOP/s (2 rows a tile before: 42-44), guarded tiles of 5
      over each row at 96-98: those now win.
    - A weight-stationary windowed convolution (its task a block of channels over the whole image) whose
      pixels waste less in guarded tiles over all of them: ResNet-18's 7 x 7 stage, 3x3 512 -> 512 in tiles
      of 5 over 49 pixels (50 computed) rather than of 4 over each row of 7 (56): 3.62 -> 2.74 ms a
      convolution, one thread on a Zen 2 core. Not its 1x1 convolutions: MnasNet's 7 x 7 1x1 192 -> 1152 ran at
      39 GFLOP/s over the pixels against 74 over each row (LLVM kept the guarded last row's accumulators in
      memory in every tile: a store and a load per multiply-add); they become one row of pixels padded to whole
      tiles before (``conv_layout.flatten_stationary_pixels``).

    Tiles of 7 rows (14 accumulators and their operands in 16 registers) spilled: 46-52 GFLOP/s. With 32
    registers (AVX-512, NEON) a width of 14 gets 7 rows already."""
    if shape.registers >= 32 or len(spatial) != 4 or len(reduce) != 3:  # NHWC: n, y, x, c; ry, rx, rc
        return spatial, None, None
    height, width = (loop_extent(sch, lp) or 1 for lp in spatial[1:3])
    if height < 2 or width < 2:
        return spatial, None, None
    vec = pick_divisor(loop_extent(sch, spatial[-1]) or 1, [lanes * 2, lanes, lanes // 2, lanes // 4, 2])
    vectors = max(1, vec // lanes)
    budget = row_budget(shape, vectors)
    most = min(8, budget)
    guard_ok = _partial_tiles(shape, vectors, 1)
    now = _rows(width, most, budget, guard_ok)
    if now >= 4 and width % now == 0:
        return spatial, None, None
    pixels = height * width
    fused = _rows(pixels, most, budget, guard_ok)
    row_pixels = math.lcm(fused, width)  # a group of tiles ends at the end of an image row
    if fused > now and pixels % fused == 0 and pixels % row_pixels == 0:
        return [spatial[0], sch.fuse(*spatial[1:3]), spatial[-1]], row_pixels, None
    # a weight-stationary task computes every pixel: its pixels are one group, the last tile partial
    extents = [loop_extent(sch, lp) or 1 for lp in spatial]
    fused = _rows(pixels, most, budget, guard_ok, guard_first=True)
    computed = -(-pixels // fused) * fused
    fewer = computed < height * -(-width // now) * now
    if _windowed(sch, reduce) and fewer and _weight_stationary(sch, extents, reduce, block, vec):
        return [spatial[0], sch.fuse(*spatial[1:3]), spatial[-1]], pixels, fused
    return spatial, None, None


def _windowed(sch, reduce) -> bool:
    """Whether a reduction has a window (a 3x3 convolution's), not only channels (a 1x1 convolution's)."""
    return int(np.prod([loop_extent(sch, lp) or 1 for lp in reduce[:-1]])) > 1


def _partial_tiles(shape: CpuShape, vectors: int, across: int) -> bool:
    """Whether a register tile of ``vectors`` (``across``) vectors per row is better guarded than short: a tile
    of two vectors with 16 vector registers (AVX2), where a short tile leaves too few accumulators to hide the
    multiply-add's latency (``_rows``)."""
    return shape.registers < 32 and vectors == 2 and across == 1


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
_STATIONARY_FEW_TASKS = 4  # enough for a 1x1 convolution whose tile's weights overflow L1


_MAX_ROWS = 14  # rows of a windowed convolution's register tile, at most (registers permitting)


def wide_head_vectors(shape: CpuShape) -> int:
    """Vectors of columns in a wide head's tile (``_wide_head``): 4 with 32 vector registers, 2 with 16."""
    return 4 if shape.registers >= 32 else 2


WIDE_HEAD_MIN_VECTORS = 16  # a wide head has at least this many such tiles of columns
WIDE_HEAD_MAX_ROWS = 66  # and at most this many rows (64 padded to 66 for AVX2: pad_matmul_columns)
_L1_WEIGHT_BYTES = 32 * 1024  # a weight-stationary task's chunk of weights, at most
# A wide head's chunk of the reduction, in channels at most. Its tile of rows reads each row's inputs as
# broadcasts beside its chunk of weights: on AVX2 (tiles of 6 rows x 2 vectors) chunks of 512 channels (32 KB
# of weights, 12 KB of a tile's inputs) lost weights' lines from L1 between tiles. The 64 x 1,024 x 8,224 head
# of a CTC recognizer on a Zen 2 core, whole model: chunks of 256 channels 4-5% faster than 512, 128 a further
# 1-4% (64 as 128); AVX-512's tiles of 5 rows x 4 vectors were fastest at 128 channels (32 KB) too. NEON's
# tiles of 16 columns (4 x 4 lanes) hold 512 channels in 32 KB as AVX2's do and are capped alike (unmeasured
# on a phone: qemu does not model caches).
_HEAD_CHUNK_DEPTH = 128
# A weight-stationary task over at most this many pixels (a 7 x 7 stage) runs chunks of half L1: the rows of
# tiles after a chunk's first prefetch the next chunk into L1, and over so few pixels it arrived while the
# current chunk was in use and took its lines. ResNet-18's 7 x 7 stage (3x3, 512 channels) on a Zen 2 core:
# chunks of 16 channels (9 KB) 16-18% faster than 32 (18 KB), the model 5% at one thread, 1-4% at two;
# ShuffleNetV2 3-4%, MnasNet 2% at one thread, the other MobileNet-style models unchanged. Over 14 x 14 (196
# pixels) half chunks were 7% slower (twice the chunks' loop overhead, nothing to win).
_FEW_PIXELS = 64
_CHUNKED_BAND_ROWS = 4  # a band's 1x1 tiles of at most this many rows run their reduction in L1 chunks


def _wide_head(sch, shape: CpuShape, rows_loop, other_layout: bool, vec_ext: int, vec: int, lanes: int) -> bool:
    """Whether a product is a classifier head over many columns with few rows (a CTC recognizer's
    [1, T, C] x [C, N], T 40-64, N thousands): constant weights, no band of rows, at least
    ``WIDE_HEAD_MIN_VECTORS`` tiles of ``wide_head_vectors`` vectors of columns, whole (``pad_matmul_columns``
    pads such heads to them). With the 32 vector registers of AVX-512 or NEON its tile is then 4 vectors by
    the rows the registers hold (5 of 40: 20 accumulators, 4 weight vectors loaded per input value
    broadcast) instead of 2 by 8: per multiply-add a quarter fewer loads. The 40 x 120 x 18,400 head of a
    CTC recognizer: 88.7 -> 104.2 GFLOP/s at one thread (2.01 -> 1.71 ms; the machine's peak is about
    111), 40 x 1,024 x 6,656: 92 -> 100 GFLOP/s. With AVX2's 16 registers the tile is 2 vectors by 5 rows
    (10 accumulators, 7 loads per 10 multiply-adds), and the columns are padded to whole pairs of
    vectors: padded to one vector, the heads' odd vector counts (6,632 = 829 x 8 columns) kept tiles of
    8 rows x 1 vector, 9 loads per 8 multiply-adds. A head over 1,024 features runs its reduction in L1
    chunks on both (``_weight_chunk``)."""
    if rows_loop is None or other_layout or vec != 2 * lanes:
        return False
    if known_extent(sch, rows_loop) > WIDE_HEAD_MAX_ROWS or not constant_weights(sch):
        return False
    tile = wide_head_vectors(shape) * lanes
    return vec_ext % tile == 0 and vec_ext >= WIDE_HEAD_MIN_VECTORS * tile


def _weight_chunk(
    sch, reduce, vec: int, bits: int, most: int | None = None, budget: int = _L1_WEIGHT_BYTES
) -> int | None:
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
    us at one thread (AVX-512).

    ``most``: channels per chunk at most (a wide head's ``_HEAD_CHUNK_DEPTH``)."""
    channels = loop_extent(sch, reduce[-1]) if reduce else None
    window = int(np.prod([loop_extent(sch, lp) or 1 for lp in reduce[:-1]]))
    per_channel = window * vec * bits // 8
    if not channels or channels * per_channel <= budget:
        return None
    chunk = 1 << max(0, min(budget // per_channel, most or channels).bit_length() - 1)
    while chunk > 1 and channels % chunk:
        chunk //= 2
    return chunk if 1 < chunk < channels else None


def _in_chunks(sch, reduce, chunk: int | None) -> tuple:
    """(the loop over the chunks of the reduction's last axis, the reduction's loops within a chunk);
    (None, ``reduce``) where ``chunk`` is None."""
    if chunk is None:
        return None, reduce
    c_o, c_i = sch.split(reduce[-1], [None, chunk])
    return c_o, [*reduce[:-1], c_i]


def _first_loop_over_one(sch, loops):
    """The first of ``loops`` with more than one iteration, or None."""
    return next((lp for lp in loops if (loop_extent(sch, lp) or 1) > 1), None)


def _weight_stationary(sch, spatial_extents: list[int], reduce, block, vec: int) -> bool:
    """Whether a convolution's tasks should be blocks of output channels rather than bands of rows:
    its weights (reduction depth x output channels) are large, more output channels than output
    pixels (so more weights than input), and there are enough channel blocks for the cores.
    ResNet-18's last stage (7 x 7 pixels, 3x3x512 -> 512, 9.4 MB of weights) read its weights
    once per output row, 7 times, and ran at 71 GFLOP/s against 160 for the stages before.
    Such a tile reads its block of weights (depth x 2 vectors: 64 KB for 512 input channels, more
    than L1) once per tile of rows, so its tile has as many rows as the registers hold, not 8:
    SqueezeNet's 13 x 13 classifier convolution (512 -> 1000) had tiles of 7 rows, the second
    guarded, and took 1.18 ms; in tiles of 13 rows, 0.85 ms.

    A 1x1 convolution with fewer or smaller weights is one too where a tile's block of weights over the
    reduction overflows L1 (a band of rows re-read it from L2 for each tile of rows) and there are still
    a few channel blocks for the cores: the projections of MnasNet's and MobileNetV2's last stages
    (7 x 7 pixels, 1152 -> 192 and 576 -> 192: 6 blocks of 2 AVX-512 vectors, 147 and 74 KB each; AVX2's
    narrower tiles made 12 blocks of the first, stationary already). In L1 chunks (``_weight_chunk``),
    213-240 -> 182-194 us and 110-121 -> 82-86 us at one thread; MnasNet 2-3% faster a run, EfficientNet-B0 1-2%."""
    depth = int(np.prod([loop_extent(sch, lp) or 1 for lp in reduce]))
    one_by_one = all((loop_extent(sch, lp) or 1) == 1 for lp in reduce[:-1])
    pixels = int(np.prod(spatial_extents[:-1]))
    return stationary_shape(spatial_extents[-1], pixels, depth, vec, dtype_bits(sch, block), one_by_one)


def stationary_shape(channels: int, pixels: int, depth: int, vec: int, bits: int, one_by_one: bool) -> bool:
    """``_weight_stationary``'s test on the convolution's shape: ``channels`` outputs per pixel, each of
    ``depth`` multiply-adds, in tiles of ``vec`` channels."""
    if channels <= pixels:
        return False
    if heavy_weights(channels, pixels, depth * channels * bits // 8) and channels // vec >= _STATIONARY_TASKS:
        return True
    return one_by_one and depth * vec * bits // 8 > _L1_WEIGHT_BYTES and channels // vec >= _STATIONARY_FEW_TASKS


def heavy_weights(channels: int, pixels: int, weight_bytes: int) -> bool:
    """A convolution whose weights outweigh its activations: more output channels than output pixels, and weights
    of at least ``_STATIONARY_WEIGHT_BYTES`` (``_weight_stationary``'s test of size)."""
    return channels > pixels and weight_bytes >= _STATIONARY_WEIGHT_BYTES


def _schedule_full_reduction(sch, block, reduce, shape: CpuShape) -> None:
    """A tensor reduced to one value (the max / min a dynamically quantised model takes of each
    activation): ``lanes`` partial results accumulated in a vector (rfactor), then combined."""
    fused = sch.fuse(*reduce) if len(reduce) > 1 else reduce[0]
    lanes = shape.lanes(dtype_bits(sch, block))
    extent = loop_extent(sch, fused)
    if extent is None or extent < 2 * lanes or extent % lanes:
        raise schedule_error("a full reduction of an odd size")
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
        and loop_extent(sch, reduce[-1]) == 1
        and all(loop_extent(sch, lp) is not None for lp in spatial)
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
    lanes = shape.lanes(dtype_bits(sch, block))
    window = (loop_extent(sch, ry) or 1) * (loop_extent(sch, rx) or 1)
    long_window = window > LONG_WINDOW
    # With 16 registers a long window's tile is 2 vectors of channels by 6 pixels where those divide (12
    # accumulators, 8 loads per 12 multiply-adds), not 1 by 12 (13 loads): the mel front end's 400-sample
    # framing (23 frames, 416 channels) 165 -> 109 us, raw_audio_cnn's (898 frames, 64 channels) 880 -> 540 us,
    # one thread on a Zen 2 core.
    pair = long_window and shape.registers < 32 and known_extent(sch, c) % (2 * lanes) == 0
    pair = pair and pick_divisor(known_extent(sch, w), [tile_rows(shape.registers) // 2, 5, 4]) > 1
    vec = 2 * lanes if pair else pick_divisor(known_extent(sch, c), [lanes, lanes // 2, lanes // 4])
    c_o, c_i = sch.split(c, [None, vec])
    # A long window (a framing convolution over audio samples: one input channel, a window of hundreds)
    # reads its weights once per tile, so its tile takes as many pixels as the registers hold, and its
    # window stays a loop: fully unrolled, the mel front end's 400-sample window made 3,200 multiply-adds of
    # straight code, beyond the instruction cache.
    most = tile_rows(shape.registers) if long_window else _DEPTHWISE_PIXELS  # conv1d.pad_frames makes one divide
    most = most // 2 if pair else most
    rows = _rows(known_extent(sch, w), most)
    guarded = known_extent(sch, w) % rows != 0
    w_o, w_i = sch.split(w, [None, rows])
    sch.reorder(n, h, c_o, w_o, ry, rx, rc, w_i, c_i)
    parallel = sch.fuse(n, h, c_o)
    sch.parallel(parallel)
    _pad_at(sch, padding, ry, shape, lanes)
    acc = sch.cache_write(block, 0, "local")
    sch.reverse_compute_at(acc, w_o)
    acc = fold_epilogue(sch, acc, shape, guarded_at=w_o if guarded else None)
    vectorize_innermost(sch, acc, lanes)
    sch.vectorize(c_i)
    sch.unroll(w_i)
    if long_window:
        sch.unroll(sch.split(rx, [None, pick_divisor(known_extent(sch, rx), [4, 2])])[1])
    else:
        sch.unroll(ry)
        sch.unroll(rx)
    sch.decompose_reduction(block, ry)


def _pad_at(sch, padding, loop, shape: CpuShape, lanes: int) -> None:
    """Compute each padding block under ``loop`` (just the input it reads), vectorised; padding
    compute_at cannot place gets a parallel pass of its own."""
    for p in padding:
        if try_(sch.compute_at, p, loop, preserve_unit_loops=True):
            vectorize_innermost(sch, p, lanes)
        else:
            schedule_injective(sch, [p], shape)


def _band_rows(extent: int) -> int:
    """Output rows per band: the largest divisor of ``extent`` leaving at least 16 tasks (enough
    to balance 2-8 cores), so a band's padded input stays small enough for the L2 cache."""
    return max([d for d in range(1, extent + 1) if extent % d == 0 and extent // d >= min(extent, 16)])


def _rows(extent: int, most: int, budget: int | None = None, partial: bool = False, guard_first: bool = False) -> int:
    """Rows in a register tile: a divisor of ``extent`` from ``most`` down to 4; else one up to
    ``budget`` (the rows the registers hold); else ``extent`` itself when it is at most ``most``;
    else 3 or 2 dividing it; only then the size that wastes least (the last tile partial).

    A partial tile is guarded by a condition TVM adds to every row of the unrolled tile, inside
    the reduction loop, and LLVM then keeps no accumulator in a register: SqueezeNet's first
    convolution (224 -> 111, 3x3 stride 2, 3 -> 64 channels) ran at 52 GFLOP/s in guarded tiles
    of 14 rows and at 129 in tiles of 3; its 1x1 convolutions at 13 x 13 and 27 x 27 now have
    tiles of 13 and 9 rows, not guarded ones of 7. The model: 5.72 -> 4.87 ms at one thread,
    3.15 -> 2.67 ms at two (medians of 5 x 300 runs, fresh builds of both).

    With ``partial`` (tiles of two vectors in AVX2's 16 registers: ``_partial_tiles``) small guarded tiles do
    not lose so, and a guarded tile wins over a short one (3 or 2 rows), though not over whole tiles of 4 (64
    columns: 93-102 GFLOP/s either way): a row fewer than the budget, unless that wastes more than an eighth
    (a 1x1 convolution at 27 columns ran at 66-86 GFLOP/s in guarded tiles of 6, varying from run to run, at
    91-94 in tiles of 5; a 3x3 one at 106 and 101). On a Zen 2 core, one thread, medians: at 27
    columns (SqueezeNet's fire modules) 3x3 and 1x1 convolutions in tiles of 3 ran at 62-63 GFLOP/s, in guarded
    tiles of 5 at 92-101; at 14 x 14 (ResNet-18, MnasNet) 77 in tiles of 4 over the pixels as one loop, 96-98
    in guarded tiles of 5 over each row. SqueezeNet 9.47 -> 8.22 ms a run, ResNet-18 46.2 -> 41.3 ms.

    A tile of fewer than 4 rows at most (a matmul of 23 rows x 5 vectors: 2) is the one that wastes least.

    ``guard_first``: the guarded tile wins over whole tiles of 4 too (a weight-stationary 3x3 convolution's
    pixels as one loop, ``_pixels_as_rows``: ResNet-18's 14 x 14 x 256 ran at 93 GFLOP/s in guarded tiles of
    5 over the 196 pixels, at 79 in whole tiles of 4)."""
    short = most - 1  # a guarded tile a row short of the budget
    partial = partial and most > 4
    cheap = partial and extent > most and (-(-extent // short) * short - extent) * 8 <= extent  # wastes <= 1/8
    if cheap and guard_first and pick_divisor(extent, [most, short]) == 1:
        return short
    exact = pick_divisor(extent, list(range(most, 3, -1)))
    if exact > 1:
        return exact
    if budget is not None and budget > most:
        exact = pick_divisor(extent, list(range(budget, most, -1)))
        if exact > 1:
            return exact
    if extent <= most:
        return extent
    if cheap:
        return short
    exact = 1 if partial else pick_divisor(extent, [3, 2])
    if exact > 1:
        return exact
    least, last = min(4, most), short if partial else most
    return min(range(least, last + 1), key=lambda r: (-(-extent // r) * r - extent, -r))
