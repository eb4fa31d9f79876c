"""A GPU schedule for matrix products and convolutions with few outputs and a long reduction: the reduction
split across a work-group's threads.

dlight's Matmul rule gives each work-group a tile of outputs (32 x 32 for OpenCL's generic family, 64 x 32
for the desktop one) and walks the whole reduction in that work-group, one step of 8 or 16 at a time, each
step a round trip to global memory. A product with few output tiles and a long reduction (a 3 x 3
convolution of 32 channels on a 40 x 40 map: 50 work-groups and 288 products per output; the strided 1-D
convolutions of an audio network: 57 frames x 256 channels, 1,280 products) then runs on a few compute units
at the latency of its serial steps: 100-300 GFLOP/s on a GPU that does tens of TFLOP/s.

Here a work-group computes an 8 x 8 tile of outputs with 16 threads per output: each thread sums every
16th product of its 2 x 2 outputs (registers), the 16 partial sums are added across the threads
(TVM's cross-thread reduction, through local memory) and the epilogue runs once per output. The same
product gets 16 times the work-groups, and each thread a sixteenth of the serial steps. Products with
enough tiles keep dlight's schedule, which reuses each loaded value across a larger tile.
"""

from __future__ import annotations

import logging

from tvmgen.compiler.gpu.matmul import is_desktop, matmul_rule

log = logging.getLogger("tvmgen.compiler")

# Below this many work-groups under dlight's Matmul tiles a product leaves most of a GPU's compute units
# idle: a phone's 2-16 each want several groups in flight to hide latency.
MIN_TILES = 64
# The desktop family's GPUs have 20-140 compute units: there a product of up to DESKTOP_MIN_TILES of its
# 128-thread groups is split too where each group would walk a reduction of LONG_REDUCTION or more (a
# 1-D convolution of 128 channels and 5 taps over 1,024 steps: 64 groups of 640 products each). A shorter
# reduction keeps dlight's tiles, which reuse each loaded value more.
DESKTOP_MIN_TILES, LONG_REDUCTION = 256, 512
# Reductions shorter than this keep dlight's schedule: each of the 16 threads would sum fewer than 8 products.
MIN_REDUCTION = 128
# The work-group: THREADS_I x THREADS_J threads of MICRO x MICRO outputs, THREADS_K threads per output
# (256 threads: within every GPU family's limit, no shared memory beyond the 256 partial sums)
THREADS_I, THREADS_J, THREADS_K, MICRO = 4, 4, 16, 2


def split_k_rule():
    """The rule, for ``compiler.gpu.default_rules``: OpenCL and Vulkan targets (CUDA keeps TVM's own
    schedules, the reference the others are measured against)."""
    from tvm.s_tir.dlight.gpu.base import GPUScheduleRule

    class SplitK(GPUScheduleRule):
        def apply(self, func, target, tunable):
            if target.kind.name not in ("opencl", "vulkan"):
                return None
            return schedule(func, target)

    return SplitK()


def _default_tile(target) -> int:
    """Outputs per work-group under the Matmul rule ``default_rules`` gives ``target``."""
    c = matmul_rule(target).get_configs(target)
    return (c.vthread_x * c.block_size_x * c.micro_size_x) * (c.vthread_y * c.block_size_y * c.micro_size_y)


def schedule(func, target):
    """The split-reduction schedule of ``func`` (a Schedule), or None where it does not apply: not one
    matrix product (as dlight's Matmul rule recognises them: a convolution is one, over its im2col view),
    a dynamic extent, a reduction shorter than MIN_REDUCTION, or MIN_TILES or more tiles under dlight's (the
    desktop family: DESKTOP_MIN_TILES where the reduction is LONG_REDUCTION or longer)."""
    from tvm import s_tir, tirx
    from tvm.s_tir.dlight.analysis import get_root_block
    from tvm.s_tir.dlight.gpu.matmul import (
        auto_inline_consumer_chain,
        auto_inline_producers,
        get_index_map,
        get_reduction_blocks,
    )

    if not isinstance(func, tirx.PrimFunc):
        return None
    sch = s_tir.Schedule(func)
    reductions = get_reduction_blocks(sch, sch.get_child_blocks(get_root_block(sch)))
    if reductions is None or len(reductions) != 1:
        return None
    main = reductions[0]
    if get_index_map(sch.get(main)) is None:
        return None
    iters = sch.get(main).iter_vars
    if not all(isinstance(iv.dom.extent, tirx.IntImm) for iv in iters):
        return None
    spatial = reduce = 1
    for iv in iters:
        if int(iv.iter_type) == tirx.IterVar.CommReduce:
            reduce *= int(iv.dom.extent)
        else:
            spatial *= int(iv.dom.extent)
    tiles = -(-spatial // _default_tile(target))
    few = tiles < MIN_TILES or (is_desktop(target) and tiles < DESKTOP_MIN_TILES and reduce >= LONG_REDUCTION)
    if reduce < MIN_REDUCTION or not few:
        return None
    # C[S, I, J] += A[S, I, K] * B[S, J, K], as dlight's Matmul normalises it
    reindex_a = sch.reindex(main, ("read", 0))
    reindex_b = sch.reindex(main, ("read", 1))
    reindex_c = sch.reindex(main, ("write", 0))
    matmul_map, a_map, b_map, c_map = get_index_map(sch.get(main))  # of the reindexed block
    sch.transform_layout(reindex_a, ("write", 0), a_map)
    sch.transform_layout(reindex_b, ("write", 0), b_map)
    sch.transform_layout(reindex_c, ("read", 0), c_map)
    sch.transform_block_layout(main, matmul_map)

    tile_i, tile_j = THREADS_I * MICRO, THREADS_J * MICRO
    sch.pad_einsum(main, [1, tile_i, tile_j, THREADS_K])
    batch, li, lj, lk = sch.get_loops(main)
    bi, ti, mi = sch.split(li, [None, THREADS_I, MICRO])
    bj, tj, mj = sch.split(lj, [None, THREADS_J, MICRO])
    ko, kt = sch.split(lk, [None, THREADS_K])  # neighbouring threads read neighbouring products
    sch.reorder(batch, bi, bj, ti, tj, kt, ko, mi, mj)
    partial = sch.rfactor(kt, factor_axis=0)  # each thread's sums; ``main`` adds them up
    batch, bi, bj, ti, tj, kt, ko, mi, mj = sch.get_loops(partial)
    sch.bind(sch.fuse(batch, bi, bj), "blockIdx.x")
    sch.bind(ti, "threadIdx.z")
    sch.bind(tj, "threadIdx.y")
    sch.bind(kt, "threadIdx.x")
    sch.set_scope(partial, 0, "local")
    sch.decompose_reduction(partial, ko)
    auto_inline_producers(sch, partial)  # the operands' reindex and padding read in place
    # the sum across the threads: its loop over the partial sums bound to the threads that hold them
    sch.reverse_compute_at(main, tj, preserve_unit_loops=True)
    inner = sch.get_loops(main)[3:]
    across = next(loop for loop in inner if int(sch.get(loop).extent) == THREADS_K)
    sch.reorder(*[loop for loop in inner if not loop.same_as(across)], across)
    sch.bind(across, "threadIdx.x")
    # the epilogue once per output, from a register copy of the sum
    store = sch.cache_write(main, 0, "local")
    sch.reverse_compute_at(store, tj, preserve_unit_loops=True)
    auto_inline_consumer_chain(sch, store)
    log.debug(
        "split reduction: %d tile(s) of dlight's, %d products per output, %d threads each", tiles, reduce, THREADS_K
    )
    return sch
