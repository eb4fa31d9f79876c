"""tvmgen's default CPU schedules: what TVM 0.27 leaves out of its CPU pipeline.

Two steps, chosen from the target's vector width (AVX-512, AVX2, NEON):

- Layout (Relax): convolutions in NHWC with HWIO weights, so the output channels are the
  innermost, contiguous axis of every convolution, depthwise convolution and pooling, the axis
  the schedules vectorise. Weights are transformed once at compile time (constant folding).
- Schedules (TIR), for each fused function TVM has not scheduled:
  * one reduction (convolution, matmul, pooling, mean) with elementwise producers and consumers:
    register tiles of ``rows x (k vectors)`` accumulated in registers, the reduction loops
    outside the tile, the bias / activation epilogue computed on the tile while it is hot, the
    outer loops fused and run in parallel;
  * elementwise / injective functions: producers inlined, innermost axis vectorised, the rest in
    parallel;
  * anything else is left as TVM lowers it (correct, but slow): the compile log says which.
Nothing here changes what is computed, only the loop order; the tests compare every scheduled
model with its reference runtime.
"""

from __future__ import annotations

import logging
from dataclasses import dataclass

import numpy as np

log = logging.getLogger("tvmgen.compiler.schedules")

DATA_PAR, COMM_REDUCE = 0, 2  # tvm IterVar kinds


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
        bits = 512 if codegen.target_has_features("avx512f", target) else (
            256 if codegen.target_has_features("avx", target) else 128)
    else:
        bits = int(codegen.llvm_get_vector_width(target)) or 128
    # 32 architectural vector registers with AVX-512 and on AArch64, 16 with AVX2/SSE and ARMv7.
    registers = 32 if bits >= 512 or aarch64 else 16
    return CpuShape(bits, registers)


# ------------------------------------------------------------------ Relax: layout

def layout_passes(target) -> list:
    """NHWC / HWIO convolutions (weights transformed at compile time); 8-bit matmuls on the
    dot-product instructions (``compiler.int8``)."""
    from tvm import relax

    from tvmgen.compiler import int8

    return [relax.transform.FoldConstant(), _ReluBoundsAsRelax(), relax.transform.ConvertLayout(
        {"relax.nn.conv2d": ["NHWC", "HWIO"], "relax.nn.conv2d_transpose": ["NHWC", "IOHW"]}),
        # pooling and elementwise ops follow their input; transposed convolutions: conv_transpose
        relax.transform.FoldConstant(), int8.Int8DotProducts(target), _NchwInputIntoConv()] if _is_cpu(target) else []


def packed_weights_passes(target) -> list:
    """Mark each TIR function's constant arguments (the bound weights) layout-free, so its
    schedule may store them in the order its loops read them (``with_packed_weights``, and
    MetaSchedule's RewriteLayout when tuning). Weights passed at run time (--separate-params)
    are left alone: rewriting them would cost a copy on every inference."""
    if not _is_cpu(target):
        return []
    import tvm
    from tvm import relax

    @tvm.transform.module_pass(opt_level=0, name="TvmgenLayoutFreeConstants")
    def _pass(mod, _ctx):
        # As TVM's AttachAttrLayoutFreeBuffers, but for constants only (that pass also takes a
        # function's parameters after "num_input") and keeping the functions' names.
        call_tir = tvm.ir.Op.get("relax.call_tir")
        free: dict = {}
        for f in mod.functions.values():
            if not isinstance(f, relax.Function) or not isinstance(f.body, relax.SeqExpr):
                continue
            for block in f.body.blocks:
                for b in block.bindings:
                    v = b.value
                    if not (isinstance(v, relax.Call) and v.op.same_as(call_tir)):
                        continue
                    consts = {i for i, a in enumerate(v.args[1].fields) if isinstance(a, tvm.ir.expr.GenericConst)}
                    gv = v.args[0]
                    free[gv] = free[gv] & consts if gv in free else consts  # constant at every call
        for gv, indices in free.items():
            if indices:
                mod[gv] = mod[gv].with_attr("layout_free_buffers", sorted(indices))
        return mod

    return [_pass]


def fold_packed_weights_passes(target) -> list:
    """After scheduling: split each weight rewrite out of its function and fold it at compile
    time, so the artifact holds the weights already packed and runs no copy."""
    if not _is_cpu(target):
        return []
    import tvm
    from tvm import relax

    @tvm.transform.module_pass(opt_level=0, name="TvmgenCheckPackedWeights")
    def _check(mod, _ctx):
        prepacks = [gv.name_hint for gv in mod.get_global_vars() if gv.name_hint.endswith("_weight_prepack")]
        scripts = "".join(f.script(show_meta=False) for f in mod.functions.values()
                          if isinstance(f, relax.Function)) if prepacks else ""
        left = sorted(name for name in prepacks if f"{name}," in scripts)  # still called
        if left:
            log.warning("weights repacked at every run, not at compile time: %s", ", ".join(left))
        return mod

    return [relax.transform.SplitLayoutRewritePreproc(), relax.transform.FoldConstant(),
            relax.transform.CanonicalizeBindings(), relax.transform.DeadCodeElimination(), _check]


def _is_cpu(target) -> bool:
    return target.kind.name == "llvm"


def _ReluBoundsAsRelax():  # noqa: N802
    """call_tir(maximum/minimum, x, scalar) -> relax maximum/minimum.

    The ONNX and TFLite importers lower Clip / ReLU6 to prebuilt TIR functions, which layout
    conversion cannot see through: it would wrap every activation in two transposes.
    """
    import tvm

    from tvmgen.compiler.rewrites import tir_min_max_as_relax

    @tvm.transform.module_pass(opt_level=0, name="TvmgenReluBoundsAsRelax")
    def _pass(mod, _ctx):
        return tir_min_max_as_relax(mod)

    return _pass


def _NchwInputIntoConv():  # noqa: N802
    """The first convolution reads an NCHW input itself (``rewrites.nchw_input_into_conv``)."""
    import tvm
    from tvm import relax

    from tvmgen.compiler.rewrites import legalize_nchw_input_conv, nchw_input_into_conv

    @tvm.transform.module_pass(opt_level=0, name="TvmgenNchwInputIntoConv")
    def _pass(mod, _ctx):
        mod = nchw_input_into_conv(mod)
        # TOPI cannot legalize it (input and output layouts differ): tvmgen's own, before TVM's
        return relax.transform.LegalizeOps({"relax.nn.conv2d": legalize_nchw_input_conv})(mod)

    return _pass


# ------------------------------------------------------------------ TIR: schedules

def DefaultSchedules(target, report: dict | None = None):  # noqa: N802 - a pass, named like TVM's
    """Schedule every TIR function not yet scheduled; ``report`` (if given) gets
    ``{"scheduled": [names], "left": [names]}``."""
    import tvm

    shape = cpu_shape(target) if _is_cpu(target) else None

    @tvm.transform.module_pass(opt_level=0, name="TvmgenDefaultSchedules")
    def _schedules(mod, _ctx):
        if shape is None:
            return mod
        tuned = [gv.name_hint for gv, f in mod.functions.items() if _is_scheduled(f)]
        done, left = schedule_module(mod, shape)
        log.info("schedules: %d from the tuning database, %d tvmgen defaults, %d left as TVM lowers them%s",
                 len(tuned), len(done), len(left), f" ({', '.join(sorted(left))})" if left else "")
        if report is not None:
            report.update(tuned=sorted(tuned), scheduled=sorted(done), left=sorted(left))
        return mod

    return _schedules


def schedule_module(mod, shape: CpuShape) -> tuple[list[str], list[str]]:
    """Schedule ``mod``'s unscheduled TIR functions in place; the names scheduled and left."""
    import tvm

    done, left, updates = [], [], {}
    for gv, func in mod.functions.items():
        if not isinstance(func, tvm.tirx.PrimFunc) or _is_scheduled(func):
            continue
        scheduled = schedule_function(func, shape, gv.name_hint)
        if scheduled is None:
            left.append(gv.name_hint)
        else:
            done.append(gv.name_hint)
            updates[gv] = scheduled.with_attr("tirx.is_scheduled", True)
    for gv, func in updates.items():
        mod[gv] = func
    return done, left


def _is_scheduled(func) -> bool:
    import tvm

    return isinstance(func, tvm.tirx.PrimFunc) and bool(func.attrs and func.attrs.get("tirx.is_scheduled"))


def schedule_function(func, shape: CpuShape, name: str = ""):
    """A scheduled copy of ``func``, or None when no rule applies."""
    sch = default_schedule(func, shape, name)
    return None if sch is None else with_packed_weights(sch).mod["main"]


def with_packed_weights(sch):
    """The schedule with its constant weights stored in the order its loops read them.

    MetaSchedule's RewriteLayout post-processing, run as MetaSchedule runs it on every tuning
    candidate (after ``enter_postproc``, so a replay of the trace without post-processing drops
    it): each weight marked layout-free (``packed_weights_passes``) is read through a copy in the
    loop order, e.g. a 1x1 convolution's HWIO weights become [Cout / vector, Cin, vector], so a
    tile streams one contiguous run instead of a vector every Cout floats. The copy is split out
    and folded at compile time. Returns ``sch`` unchanged when the function has no such weight
    or the rewrite does not fit."""
    from tvmgen.compiler import int8

    func = sch.mod["main"]
    if not (func.attrs and func.attrs.get("layout_free_buffers")) or int8.dot_block(sch) is not None:
        return sch  # nothing to pack, or packed for the dot-product instruction already
    from tvm.s_tir.meta_schedule.postproc import RewriteLayout

    if not any(COMM_REDUCE in _iter_kinds(sch, b) for b in sch.get_child_blocks(sch.get_sblock("root"))):
        return sch  # elementwise: nothing gained, and see _lossless below
    trial = sch.copy()
    trial.enter_postproc()
    before = len(trial.trace.insts)
    # RewriteLayout reports success when it found nothing to rewrite: count what it added
    if not (_try(RewriteLayout().apply, trial) and len(trial.trace.insts) > before):
        return sch
    return trial if _lossless(trial) else sch


def _lossless(sch) -> bool:
    """Whether every packed copy holds all of its weight. TVM's RewriteLayout derives the packed
    layout from one read of the buffer: a weight read at two offsets (a GRU's bias, read for
    two gates as ``b[i]`` and ``b[i + 24]``) got a copy of half its size, and wrong results."""
    for block in sch.get_child_blocks(sch.get_sblock("root")):
        b = sch.get(block)
        if b.annotations.get("meta_schedule.layout_rewrite_preproc"):
            sizes = {int(np.prod([int(d) for d in r.source.shape])) for r in [*b.reads, *b.writes]}
            if len(sizes) != 1:
                return False
    return True


def default_schedule(func_or_mod, shape: CpuShape, name: str = ""):
    """The default schedule as an ``s_tir.Schedule`` (its trace can seed a tuning database), or None."""
    from tvm import s_tir

    from tvmgen.compiler import int8

    sch = s_tir.Schedule(func_or_mod)
    dot = int8.dot_block(sch)
    if dot is not None:
        try:
            int8.schedule_dot(sch, dot, shape.registers, lambda s, acc: _fold_epilogue(s, acc, shape),
                              lambda s, blocks: _schedule_injective(s, blocks, shape))
            return sch
        except Exception as e:  # noqa: BLE001
            log.debug("%s: no dot-product schedule (%s)", name, str(e).splitlines()[-1] if str(e) else type(e).__name__)
            return None
    for depthwise_rule in (True, False):  # the depthwise rule, else the general one
        if not depthwise_rule:  # the depthwise rule did not fit: start again from the function
            sch = s_tir.Schedule(func_or_mod)
        blocks = sch.get_child_blocks(sch.get_sblock("root"))
        reductions = [b for b in blocks if COMM_REDUCE in _iter_kinds(sch, b)]
        try:
            if not reductions:
                _schedule_injective(sch, blocks, shape)
            elif len(reductions) == 1:
                _schedule_reduction(sch, reductions[0], shape, depthwise_rule)
            else:
                log.debug("%s: %d reductions, left unscheduled", name, len(reductions))
                return None
            return sch
        except Exception as e:  # noqa: BLE001 - a rule that does not fit leaves the function as TVM lowers it
            if depthwise_rule:  # a depthwise convolution the depthwise rule does not fit: try the general one
                continue
            log.debug("%s: no default schedule (%s)", name, str(e).splitlines()[-1] if str(e) else type(e).__name__)
            return None
    return None


def _iter_kinds(sch, block) -> list[int]:
    return [int(iv.iter_type) for iv in sch.get(block).iter_vars]


def _extent(sch, loop) -> int | None:
    ext = sch.get(loop).extent
    return int(ext.value) if hasattr(ext, "value") else None


def _pick(extent: int, candidates) -> int:
    for c in candidates:
        if c <= extent and extent % c == 0:
            return c
    return 1


def _schedule_injective(sch, blocks, shape: CpuShape) -> None:
    for b in blocks[:-1]:
        sch.compute_inline(b)
    out = blocks[-1]
    loops = sch.get_loops(out)
    if not loops:
        return
    lanes = shape.lanes(_dtype_bits(sch, out))
    inner = _extent(sch, loops[-1]) or 1
    vec = _pick(inner, [lanes * 2, lanes, lanes // 2, lanes // 4]) if inner >= 4 else inner
    if vec > 1:
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


def _dtype_bits(sch, block) -> int:
    return int(sch.get(block).writes[0].source.dtype.bits)


def _schedule_reduction(sch, block, shape: CpuShape, depthwise_rule: bool = True) -> None:
    # Producers that only copy (1x1 convolution "padding", reshapes) are inlined; real padding is
    # computed per parallel task below (inlined, its bounds checks would sit in the inner loop).
    padding = []
    for p in sch.get_producers(block):
        if "if_then_else" not in str(sch.get(p).body):
            sch.compute_inline(p)
        else:
            padding.append(p)

    kinds = _iter_kinds(sch, block)
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
    vec = _pick(vec_ext, [lanes * 2, lanes, lanes // 2, lanes // 4, 2])
    vectors = max(1, vec // lanes)
    budget = max(1, (shape.registers - 4) // vectors)  # accumulators, plus a few for operands
    rows_loop = next((lp for lp in reversed(spatial[:-1]) if (_extent(sch, lp) or 1) > 1), None)
    rows = _rows(_extent(sch, rows_loop), min(8, budget)) if rows_loop is not None else 1

    wide = 1
    if rows_loop is None and vectors == 1:
        # A matrix-vector product (a classifier's dense layer): no rows to tile, so the tile is
        # several vectors of one row, and each task streams contiguous runs of the weights.
        wide = _pick(vec_ext // vec, list(range(budget, 1, -1)))
    if wide > 1:
        v_o, v_u, v_i = sch.split(spatial[-1], [None, wide, vec])
        outer, inner = list(spatial[:-1]), [v_u, v_i]
    else:
        v_o, v_i = sch.split(spatial[-1], [None, vec])
        outer, inner = list(spatial[:-1]), [v_i]
    if rows > 1:
        r_o, r_i = sch.split(rows_loop, [None, rows])
        # the row tile's outer part stays where the row loop was
        outer = [r_o if lp.same_as(rows_loop) else lp for lp in outer]
        inner = [r_i, v_i]
    # Convolutions run in bands of output rows: a parallel task is a band of tiles, not one tile
    # (fewer, larger tasks measured faster), and pads the input rows its band reads while they
    # are in cache (the overlap with the next band is small). Without a band axis (matmul, dense),
    # a task is one tile and pads what it reads.
    rows_at = next((i for i, lp in enumerate(spatial) if rows_loop is not None and lp.same_as(rows_loop)),
                   len(outer))
    band = next((lp for lp in reversed(outer[:rows_at]) if (_extent(sch, lp) or 1) > 1), None)

    if band is not None:
        b_o, b_i = sch.split(band, [None, _band_rows(_extent(sch, band))])
        at = outer.index(band)
        task, serial = [*outer[:at], b_o], [b_i, *outer[at + 1:], v_o]
    else:
        task, serial = [*outer, v_o], []
    sch.reorder(*task, *serial, *reduce, *inner)
    parallel = sch.fuse(*task) if len(task) > 1 else task[0]
    sch.parallel(parallel)
    tile = serial[-1] if serial else parallel
    _pad_at(sch, padding, parallel, shape, lanes)

    acc = sch.cache_write(block, 0, "local")
    sch.reverse_compute_at(acc, tile)
    _fold_epilogue(sch, acc, shape)
    wb = sch.get_loops(acc)[1 + len(serial):]
    if wb:
        inner_wb = wb[-1]
        ext = _extent(sch, inner_wb) or 1
        wv = _pick(ext, [lanes * 2, lanes, lanes // 2, lanes // 4])
        if wv > 1:
            _, li = sch.split(inner_wb, [None, wv])
            sch.vectorize(li)
    sch.vectorize(v_i)
    if rows > 1 or wide > 1:  # the tile's rows, or a wide tile's vectors
        sch.unroll(inner[0])
    if reduce:  # after vectorize: without its init the block is no longer a "reduction block"
        sch.decompose_reduction(block, reduce[0])


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
    init = sch.decompose_reduction(partial, p_outer)  # after vectorize, as in _schedule_reduction
    sch.vectorize(sch.get_loops(init)[-1])


def _is_depthwise(sch, spatial, reduce) -> bool:
    """NHWC depthwise convolution: a window (ry, rx) and a channel reduction of one."""
    return len(spatial) == 4 and len(reduce) == 3 and _extent(sch, reduce[-1]) == 1 and all(
        _extent(sch, lp) is not None for lp in spatial)


def _schedule_depthwise(sch, block, padding, spatial, reduce, shape: CpuShape) -> None:
    """Depthwise convolution does 9 multiply-adds per output and reads as much as it computes, so
    its tile is small (4 pixels x 1 vector of channels), a task is one output row of one channel
    vector, and the padded input is made per window row, just before the tile reads it (it stays
    in registers / L1). Measured on the builtin model: 0.40 -> 0.23 ms for its nine depthwise
    convolutions, against 0.37 with the convolution tiles."""
    n, h, w, c = spatial
    ry, rx, rc = reduce
    lanes = shape.lanes(_dtype_bits(sch, block))
    vec = _pick(_extent(sch, c), [lanes, lanes // 2, lanes // 4])
    c_o, c_i = sch.split(c, [None, vec])
    w_o, w_i = sch.split(w, [None, _rows(_extent(sch, w), 4)])
    sch.reorder(n, h, c_o, w_o, ry, rx, rc, w_i, c_i)
    parallel = sch.fuse(n, h, c_o)
    sch.parallel(parallel)
    _pad_at(sch, padding, ry, shape, lanes)
    acc = sch.cache_write(block, 0, "local")
    sch.reverse_compute_at(acc, w_o)
    _fold_epilogue(sch, acc, shape)
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
        if _try(sch.compute_at, p, loop, preserve_unit_loops=True):
            _vectorize_innermost(sch, p, lanes)
        else:
            _schedule_injective(sch, [p], shape)


def _fold_epilogue(sch, acc, shape: CpuShape) -> None:
    """Fold the epilogue (bias, activation) into the write-back of the tile ``acc``."""
    while True:
        consumers = sch.get_consumers(acc)
        if len(consumers) != 1:
            break
        if not _try(sch.reverse_compute_inline, consumers[0]):  # not elementwise: a separate pass
            _schedule_injective(sch, [consumers[0]], shape)
            break


def _band_rows(extent: int) -> int:
    """Output rows per band: the largest divisor of ``extent`` leaving at least 16 tasks (enough
    to balance 2-8 cores), so a band's padded input stays small enough for the L2 cache."""
    return max([d for d in range(1, extent + 1) if extent % d == 0 and extent // d >= min(extent, 16)])


def _vectorize_innermost(sch, block, lanes: int) -> None:
    loops = sch.get_loops(block)
    ext = _extent(sch, loops[-1]) or 1
    v = _pick(ext, [lanes, lanes // 2, lanes // 4]) if ext >= 4 else 1
    if v > 1:
        _, li = sch.split(loops[-1], [None, v])
        sch.vectorize(li)


def _rows(extent: int, most: int) -> int:
    """Rows in a register tile: a divisor of ``extent`` when a good one exists, else the size that
    wastes least (the last tile is then partial, guarded by a condition TVM adds)."""
    exact = _pick(extent, [r for r in range(most, 3, -1)])
    if exact > 1:
        return exact
    if extent <= most:
        return extent
    return min(range(4, most + 1), key=lambda r: (-(-extent // r) * r - extent, -r))


def _try(primitive, *args, **kwargs) -> bool:
    """Apply a schedule primitive that may not fit; whether it did. (A failed primitive leaves the
    schedule as it was.)"""
    try:
        primitive(*args, **kwargs)
        return True
    except Exception:  # noqa: BLE001
        return False


def _schedule_error(msg: str):
    from tvm import s_tir

    return s_tir.ScheduleError(msg)
