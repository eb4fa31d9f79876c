"""A GPU schedule for a reduction of a whole tensor to one value (a ``mean`` or ``sum`` over every axis, a
``max`` of a score map), with its epilogue (the mean's division).

dlight's rules expect outputs to spread over work-groups. With one output there is none to spread:
its Reduction rule raises (rfactor: "block_realize == old_block_realize"), and its GeneralReduction rule
binds a work-group of one thread inside the reduction's loops, which leaves those loops in host code: one
kernel launch per element reduced. A voice-activity detector's mean over 16 x 32 values took 512 launches,
3.3 ms a run on NVIDIA's OpenCL where its two LSTMs take 90 us.

Here one work-group of ``THREADS`` threads reduces the whole tensor: each thread sums every THREADS-th
value in a register, TVM's cross-thread reduction adds the partial sums, and the epilogue runs once.
"""

from __future__ import annotations

THREADS = 256  # within every GPU family's work-group limit (``platforms.GPU_LIMITS``)


def full_reduction_rule():
    """The rule, for ``compiler.gpu.default_rules``: OpenCL and Vulkan targets (CUDA keeps TVM's own
    schedules, the reference the others are measured against)."""
    from tvm.s_tir.dlight.gpu.base import GPUScheduleRule

    class FullReduction(GPUScheduleRule):
        def apply(self, func, target, tunable):
            if target.kind.name not in ("opencl", "vulkan"):
                return None
            return schedule(func, min(THREADS, int(target.attrs["max_num_threads"])))

    return FullReduction()


def schedule(func, threads: int = THREADS):
    """The one-work-group schedule of ``func`` (a Schedule), or None where it does not apply: not one
    reduction block with a single output (every spatial extent 1) after its producers are inlined, followed
    by at most one block that writes one value (the epilogue)."""
    from tvm import s_tir, tirx
    from tvm.s_tir.dlight.analysis import normalize_prim_func
    from tvm.s_tir.dlight.base import try_inline

    if not isinstance(func, tirx.PrimFunc):
        return None
    try:
        sch = s_tir.Schedule(func)
        infos = normalize_prim_func(sch)
        if infos is None:
            return None
        infos = try_inline(sch, infos)
        reductions = [i for i in infos if "R" in i.dom_kind()]
        rest = [i for i in infos if "R" not in i.dom_kind()]
        if len(reductions) != 1 or len(rest) > 1:
            return None
        iters = reductions[0].iters
        if set(reductions[0].dom_kind()) - {"S", "R"}:
            return None
        if any(not isinstance(it.dom, int) for it in iters) or any(it.dom != 1 for it in iters if it.kind != "R"):
            return None
        if rest and any(it.dom != 1 for it in rest[0].iters):
            return None
        red = reductions[0].block_rv
        if len(sch.get(red).writes) != 1:  # an argmax's index and value: TVM's own rules
            return None
        # the sum in a register: the epilogue reads it, or a copy-out block (made here) stores it
        epi = rest[0].block_rv if rest else sch.cache_write(red, 0, "local")
        if rest:
            sch.set_scope(red, 0, "local")
        unit = [it.loop_rv for it in iters if it.kind != "R"]
        reduce = [it.loop_rv for it in iters if it.kind == "R"]
        sch.reorder(*unit, *reduce)
        r = sch.fuse(*reduce) if len(reduce) > 1 else reduce[0]
        r_o, r_i = sch.split(r, factors=[None, threads])
        sch.reorder(r_i, r_o)
        bx = sch.fuse(*unit) if len(unit) > 1 else unit[0] if unit else sch.add_unit_loop(r_i)
        sch.bind(bx, "blockIdx.x")
        sch.bind(r_i, "threadIdx.x")
        sch.reverse_compute_at(epi, bx, preserve_unit_loops=True)
        inner = sch.get_loops(epi)[1:]
        tx = sch.fuse(*inner) if len(inner) > 1 else inner[0] if inner else sch.add_unit_loop(epi)
        sch.bind(tx, "threadIdx.x")
        return sch
    except Exception:  # a loop nest these primitives refuse: another rule schedules it
        return None
