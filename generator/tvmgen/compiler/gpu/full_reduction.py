"""GPU schedules for reductions of few outputs over many values: a work-group per output.

- **One output** (a ``mean`` or ``sum`` over every axis, with the mean's division): dlight has no rule for it.
  Its Reduction rule raises (rfactor: "block_realize == old_block_realize"), and its GeneralReduction rule
  binds a work-group of one thread inside the reduction's loops, which leaves those loops in host code: one
  kernel launch per element reduced. A voice-activity detector's mean over 16 x 32 values took 512 launches,
  3.3 ms a run on NVIDIA's OpenCL where its two LSTMs take 90 us.
- **A few outputs over a long reduction** (an audio classifier's mean over 998 frames of 16 channels): dlight's
  Reduction rule puts every output in one work-group, 16 threads each, which walk the 998 values in 63 serial
  steps: 12-14 us on NVIDIA's OpenCL, a third of the model, on one of the GPU's 132 compute units.
- **The innermost values of each output, a warp's or more** (a 7 x 7 global average over 576 channels): the
  short-reduction rule gave each output one thread walking its 49 values, 15 us.
- **A reduction no dlight rule takes** (a byte CNN's max over 512 positions of 128 channels, behind a squeeze):
  Fallback gave one thread per output, its running maximum stored to global memory at every step: 37 us.

Here each output gets a work-group of up to ``THREADS`` threads: each thread reduces every THREADS-th value in a
register, TVM's cross-thread reduction combines the partial results, and the epilogue (the division) runs once
per output. ``TVMGEN_GPU_FEW_OUTPUTS=0`` at compile time leaves them to dlight's rules.
"""

from __future__ import annotations

import os

import numpy as np

THREADS = 256  # within every GPU family's work-group limit (``platforms.GPU_LIMITS``)
FEW_OUTPUTS, LONG_REDUCTION = 32, 256  # taken before dlight's Reduction rule: at most these outputs, this long
ROW_VALUES = 32  # before the short-reduction rule: a reduction over the innermost values, at least this many
ROW_REDUCTION = 64  # after dlight's rules: reductions longer than SMALL_REDUCTION (a thread per output below)


def full_reduction_rule():
    """The rule for one output, or a few over a long reduction (before dlight's Reduction rule), for
    ``compiler.gpu.default_rules``: OpenCL and Vulkan targets (CUDA keeps TVM's own schedules, the reference
    the others are measured against)."""
    return _rule(
        "FullReduction",
        lambda outputs, reduced, inputs, innermost: (
            outputs == 1 or (inputs == 1 and outputs <= FEW_OUTPUTS and reduced >= LONG_REDUCTION)
        ),
    )


def row_reduction_rule():
    """The rule for a reduction of one tensor over its innermost values, at least a warp's (ROW_VALUES: a 7 x 7
    global average, consecutive threads reading consecutive values), before the short-reduction rule, which
    gave each such output one thread walking its values (MobileNetV3-Small's squeeze-excite means of 288 and
    576 channels over 7 x 7: 15 us each on NVIDIA's OpenCL, 6.6-6.8 us so)."""
    return _rule(
        "RowReduction", lambda outputs, reduced, inputs, innermost: inputs == 1 and innermost and reduced >= ROW_VALUES
    )


def late_row_reduction_rule():
    """The rule for any other reduction of one tensor longer than SMALL_REDUCTION that dlight's Reduction and
    GeneralReduction rules leave to Fallback (placed before it)."""
    return _rule("RowReduction", lambda outputs, reduced, inputs, innermost: inputs == 1 and reduced > ROW_REDUCTION)


def _rule(name: str, takes):
    from tvm.s_tir.dlight.gpu.base import GPUScheduleRule

    def apply(self, func, target, tunable):
        if target.kind.name not in ("opencl", "vulkan") or os.environ.get("TVMGEN_GPU_FEW_OUTPUTS", "1") == "0":
            return None
        return schedule(func, min(THREADS, int(target.attrs["max_num_threads"])), takes)

    return type(name, (GPUScheduleRule,), {"apply": apply})()


def schedule(func, threads: int = THREADS, takes=None):
    """The work-group-per-output schedule of ``func`` (a Schedule), or None where it does not apply: not one
    reduction block of static extents after its producers are inlined, followed by at most one block with one
    value per output (the epilogue); or ``takes(outputs, values reduced per output, tensors read, whether the
    values reduced into an output are consecutive)`` says no (default: one output only)."""
    from tvm import s_tir, tirx
    from tvm.s_tir.dlight.analysis import normalize_prim_func
    from tvm.s_tir.dlight.base import try_inline

    if not isinstance(func, tirx.PrimFunc):
        return None
    try:
        sch = s_tir.Schedule(func)
        infos = normalize_prim_func(sch)
        infos = try_inline(sch, infos) if infos is not None else None
    except Exception:  # a structure dlight's analysis cannot take: another rule's
        return None
    if infos is None:
        return None
    reductions = [i for i in infos if "R" in i.dom_kind()]
    rest = [i for i in infos if "R" not in i.dom_kind()]
    if len(reductions) != 1 or len(rest) > 1 or set(reductions[0].dom_kind()) - {"S", "R"}:
        return None
    iters = reductions[0].iters
    if any(not isinstance(it.dom, int) for it in iters + (rest[0].iters if rest else [])):
        return None
    outputs = reduced = 1
    for it in iters:
        if it.kind == "R":
            reduced *= it.dom
        else:
            outputs *= it.dom
    red = reductions[0].block_rv
    block = sch.get(red)
    if len(block.writes) != 1:  # an argmax's index and value: TVM's own rules
        return None
    reads = [r for r in block.reads if not r.source.same_as(block.writes[0].source)]
    inputs = len({r.source for r in reads})
    # read with a reduction index last: the values reduced into an output are consecutive in memory
    last = reads[0].region[-1].min if len(reads) == 1 and len(reads[0].region) else None
    innermost = last is not None and any(
        last.same_as(iv.var) for iv in block.iter_vars if int(iv.iter_type) == tirx.IterVar.CommReduce
    )
    if not (takes or (lambda o, r, i, last: o == 1))(outputs, reduced, inputs, innermost):
        return None
    if rest and int(np.prod([it.dom for it in rest[0].iters])) != outputs:
        return None  # an epilogue that broadcasts the results (a normalisation): not one value per output
    try:
        return _one_group_per_output(sch, red, rest[0].block_rv if rest else None, iters, threads, reduced)
    except Exception:  # a loop nest these primitives refuse: another rule schedules it
        return None


def _one_group_per_output(sch, red, epilogue, iters, threads: int, reduced: int):
    """``schedule``'s loops: a work-group per output, its threads over the values reduced (at most ``threads``,
    no more than the values), the epilogue (or a copy-out block made here) once per group."""
    # each output's result in a register: the epilogue reads it, or the copy-out block stores it
    epi = epilogue if epilogue is not None else sch.cache_write(red, 0, "local")
    if epilogue is not None:
        sch.set_scope(red, 0, "local")
    spatial = [it.loop_rv for it in iters if it.kind != "R"]
    reduce = [it.loop_rv for it in iters if it.kind == "R"]
    sch.reorder(*spatial, *reduce)
    r = sch.fuse(*reduce) if len(reduce) > 1 else reduce[0]
    width = min(threads, max(32, 1 << (reduced - 1).bit_length()))
    r_o, r_i = sch.split(r, factors=[None, width])
    sch.reorder(r_i, r_o)
    bx = sch.fuse(*spatial) if len(spatial) > 1 else spatial[0] if spatial else sch.add_unit_loop(r_i)
    sch.bind(bx, "blockIdx.x")
    sch.bind(r_i, "threadIdx.x")
    sch.reverse_compute_at(epi, bx, preserve_unit_loops=True)
    inner = sch.get_loops(epi)[1:]
    one = sch.fuse(*inner) if len(inner) > 1 else inner[0] if inner else sch.add_unit_loop(epi)
    # the output's one value stored by the group's first thread: the loop split by the threads' count (a
    # predicate, thread < 1); bound as it is, TVM widens it to every thread, each storing at its own offset
    # from the output, over the next groups' outputs and past the tensor's end
    _, tx = sch.split(one, factors=[None, width])
    sch.bind(tx, "threadIdx.x")
    return sch
