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
Nothing here changes what is computed, only the loop order, with two exceptions within float32
rounding: float32 sigmoid's ``exp`` is a polynomial that vectorises (``fast_math.vector_exp``, 7.5e-8
relative), ``erf`` and ``tanh`` rational functions (``fast_math.vector_erf``, ``vector_tanh``, 4.3e-7
absolute), and convolutions with channel counts short of whole vectors compute a few zero channels
more (``conv_layout.pad_conv_output_channels``); the tests compare every scheduled model with its
reference runtime. This module holds the passes and picks a rule for each function;
the rules themselves are in ``schedule_rules`` and ``reduction_rules``.
"""

from __future__ import annotations

import logging

import numpy as np

from tvmgen.compiler.cpu import reduction_rules
from tvmgen.compiler.cpu import schedule_rules as rules
from tvmgen.compiler.cpu.schedule_rules import CpuShape, cpu_shape

log = logging.getLogger("tvmgen.compiler.cpu.schedules")


def legalize_map() -> dict:
    """tvmgen's lowering of the operators TOPI lowers badly or not at all in the layouts the CPU
    pipeline uses (``compiler.conv_transpose``), sigmoid, erf, tanh, exp, log and constant powers in
    vectors (``fast_math.legalize_sigmoid``, ``legalize_erf``, ``legalize_tanh``, ``legalize_exp``,
    ``legalize_log``, ``legalize_power``), quantize without
    divisions (``int8_qdq.legalize_quantize``) and softmax (``compiler.softmax``)."""
    from tvmgen.compiler import conv_transpose
    from tvmgen.compiler.cpu import fast_math, softmax
    from tvmgen.compiler.int8 import int8_qdq

    return {
        **conv_transpose.legalize_map(),
        "relax.sigmoid": fast_math.legalize_sigmoid,
        "relax.erf": fast_math.legalize_erf,
        "relax.tanh": fast_math.legalize_tanh,
        "relax.exp": fast_math.legalize_exp,
        "relax.log": fast_math.legalize_log,
        "relax.power": fast_math.legalize_power,
        "relax.quantize": int8_qdq.legalize_quantize,
        "relax.nn.softmax": softmax.legalize_softmax,
    }


# ------------------------------------------------------------------ Relax: layout


def layout_passes(target) -> list:
    """NHWC / HWIO convolutions (weights transformed at compile time); 8-bit matmuls on the
    dot-product instructions (``compiler.int8``)."""
    from tvm import relax

    from tvmgen.compiler import int8, rewrites
    from tvmgen.compiler.cpu import conv1d
    from tvmgen.compiler.int8 import requantize

    return (
        [
            conv1d.Conv1dAsConv2d(),
            conv1d.PadFrames(target),
            relax.transform.FoldConstant(),
            _ReluBoundsAsRelax(),
            *rewrites.before_layout_conversion(),
            relax.transform.ConvertLayout(
                {"relax.nn.conv2d": ["NHWC", "HWIO"], "relax.nn.conv2d_transpose": ["NHWC", "IOHW"]}
            ),
            # pooling and elementwise ops follow their input; transposed convolutions: conv_transpose
            relax.transform.FoldConstant(),
            int8.Int8DotProducts(target),
            _PadConvChannels(target),
            requantize.FoldRequantize(),  # before the next pass legalizes every operator
            _NchwInputIntoConv(),
        ]
        if _is_cpu(target)
        else []
    )


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
    time, so the artifact holds the weights already packed and runs no copy; then the kernels
    feeding a concatenation write into it directly (``_ConcatInPlace``)."""
    if not _is_cpu(target):
        return []
    import tvm
    from tvm import relax

    @tvm.transform.module_pass(opt_level=0, name="TvmgenCheckPackedWeights")
    def _check(mod, _ctx):
        prepacks = [gv.name_hint for gv in mod.get_global_vars() if gv.name_hint.endswith("_weight_prepack")]
        scripts = (
            "".join(f.script(show_meta=False) for f in mod.functions.values() if isinstance(f, relax.Function))
            if prepacks
            else ""
        )
        left = sorted(name for name in prepacks if f"{name}," in scripts)  # still called
        if left:
            log.warning("weights repacked at every run, not at compile time: %s", ", ".join(left))
        return mod

    return [
        relax.transform.SplitLayoutRewritePreproc(),
        relax.transform.FoldConstant(),
        relax.transform.CanonicalizeBindings(),
        relax.transform.DeadCodeElimination(),
        _check,
        _ConcatInPlace(),
    ]


def _ConcatInPlace():  # noqa: N802
    """After scheduling: the kernels that make a concatenation's inputs write their slices of it
    directly, and the copy goes (``memory_rewrites.concat_in_place``)."""
    from tvmgen.compiler.cpu.memory_rewrites import concat_in_place
    from tvmgen.compiler.rewrites import module_pass

    return module_pass("TvmgenConcatInPlace", concat_in_place)


def _is_cpu(target) -> bool:
    return target.kind.name == "llvm"


def _ReluBoundsAsRelax():  # noqa: N802
    """call_tir(maximum/minimum, x, scalar) -> relax maximum/minimum.

    The ONNX and TFLite importers lower Clip / ReLU6 to prebuilt TIR functions, which layout
    conversion cannot see through: it would wrap every activation in two transposes.
    """
    from tvmgen.compiler.rewrites import module_pass, tir_min_max_as_relax

    return module_pass("TvmgenReluBoundsAsRelax", tir_min_max_as_relax)


def _PadConvChannels(target):  # noqa: N802
    """Convolutions compute whole vectors of output channels (``conv_layout.pad_depthwise_chains``,
    ``conv_layout.pad_conv_output_channels``), and matmuls with constant weights whole vectors of output
    columns (``matmul_layout.pad_matmul_columns``), a softmax over them rows of whole vectors
    (``matmul_layout.softmax_over_padded_columns``)."""
    from tvmgen.compiler.cpu.conv_layout import (
        flatten_stationary_pixels,
        pad_conv_output_channels,
        pad_conv_output_width,
        pad_depthwise_chains,
    )
    from tvmgen.compiler.cpu.matmul_layout import pad_matmul_columns, softmax_over_padded_columns
    from tvmgen.compiler.cpu.reduction_rules import (
        WIDE_HEAD_MAX_ROWS,
        WIDE_HEAD_MIN_VECTORS,
        row_budget,
        wide_head_vectors,
    )
    from tvmgen.compiler.rewrites import module_pass

    shape = cpu_shape(target)
    lanes = shape.lanes(32)
    head = (wide_head_vectors(shape), WIDE_HEAD_MIN_VECTORS, WIDE_HEAD_MAX_ROWS)  # as _wide_head tiles

    # with 16 registers (AVX2) the tiles of 6 rows x 2 vectors: widths and product rows without such a tile
    # padded to one, a stationary convolution's odd vector count to pairs
    row_tile = row_budget(shape, 2) if shape.registers < 32 else 0

    def pad(mod):
        mod = pad_conv_output_channels(pad_depthwise_chains(mod, lanes), lanes, odd_pairs=row_tile > 0)
        if row_tile:
            mod = flatten_stationary_pixels(mod, lanes, row_tile)
            mod = pad_conv_output_width(mod, lanes, row_tile)
        return softmax_over_padded_columns(pad_matmul_columns(mod, lanes, *head, row_tile))

    return module_pass("TvmgenPadConvChannels", pad)


def _NchwInputIntoConv():  # noqa: N802
    """The first convolution reads an NCHW input itself (``conv_layout.nchw_input_into_conv``)."""
    from tvm import relax

    from tvmgen.compiler.cpu.conv_layout import legalize_nchw_input_conv, nchw_input_into_conv
    from tvmgen.compiler.rewrites import module_pass

    def _pass(mod):
        mod = nchw_input_into_conv(mod)
        # TOPI cannot legalize it (input and output layouts differ): tvmgen's own, before TVM's.
        # (This legalizes every operator: tvmgen's other CPU lowerings too, legalize_map.)
        return relax.transform.LegalizeOps({**legalize_map(), "relax.nn.conv2d": legalize_nchw_input_conv})(mod)

    return module_pass("TvmgenNchwInputIntoConv", _pass)


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
        written = [gv.name_hint for gv, f in mod.functions.items() if _is_handwritten(f)]
        tuned = [gv.name_hint for gv, f in mod.functions.items() if _is_scheduled(f) and not _is_handwritten(f)]
        done, left = schedule_module(mod, shape)
        log.info(
            "schedules: %d from the tuning database, %d tvmgen defaults, %d tvmgen kernels, "
            "%d left as TVM lowers them%s",
            len(tuned),
            len(done),
            len(written),
            len(left),
            f" ({', '.join(sorted(left))})" if left else "",
        )
        if report is not None:
            report.update(tuned=sorted(tuned), scheduled=sorted(done), handwritten=sorted(written), left=sorted(left))
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


def _is_handwritten(func) -> bool:
    """tvmgen's own kernels, written scheduled (compiler/recurrent.py's LSTM / GRU)."""
    import tvm

    return isinstance(func, tvm.tirx.PrimFunc) and bool(func.attrs and "tvmgen.recurrent" in func.attrs)


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

    if not rules.constant_weights(sch) or int8.dot_block(sch) is not None:
        return sch  # nothing to pack, or packed for the dot-product instruction already
    from tvm.s_tir.meta_schedule.postproc import RewriteLayout

    if not any(rules.COMM_REDUCE in rules.iter_kinds(sch, b) for b in sch.get_child_blocks(sch.get_sblock("root"))):
        return sch  # elementwise: nothing gained, and see _lossless below
    trial = sch.copy()
    trial.enter_postproc()
    before = len(trial.trace.insts)
    # RewriteLayout reports success when it found nothing to rewrite: count what it added
    if not (rules.try_(RewriteLayout().apply, trial) and len(trial.trace.insts) > before):
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


def _inline_dequantize(sch) -> None:
    """An 8-bit input dequantised as it is read (``int8_qdq._depthwise_from_8bit``): inlined first."""
    from tvmgen.compiler.int8 import int8_qdq

    for b in sch.get_child_blocks(sch.get_sblock("root")):
        if sch.get(b).name_hint == int8_qdq.INLINE_DEQUANTIZE:
            rules.try_(sch.compute_inline, b)


def default_schedule(func_or_mod, shape: CpuShape, name: str = ""):
    """The default schedule as an ``s_tir.Schedule`` (its trace can seed a tuning database), or None."""
    from tvm import s_tir

    from tvmgen.compiler import int8

    sch = s_tir.Schedule(func_or_mod)
    dot = int8.dot_block(sch)
    if dot is not None:
        try:
            int8.schedule_dot(
                sch,
                dot,
                shape.registers,
                lambda s, acc: rules.fold_epilogue(s, acc, shape),
                lambda s, blocks: rules.schedule_injective(s, blocks, shape),
            )
            return sch
        except Exception as e:
            log.debug("%s: no dot-product schedule (%s)", name, str(e).splitlines()[-1] if str(e) else type(e).__name__)
            return None
    _inline_dequantize(sch)
    blocks = sch.get_child_blocks(sch.get_sblock("root"))
    if sum(rules.COMM_REDUCE in rules.iter_kinds(sch, b) for b in blocks) > 1:
        try:  # softmax, layer normalisation: reductions along rows
            rules.schedule_rows(sch, shape)
            return sch
        except Exception as e:
            log.debug("%s: no row schedule (%s)", name, str(e).splitlines()[-1] if str(e) else type(e).__name__)
            return None
    for depthwise_rule in (True, False):  # the depthwise rule, else the general one
        if not depthwise_rule:  # the depthwise rule did not fit: start again from the function
            sch = s_tir.Schedule(func_or_mod)
            _inline_dequantize(sch)
        blocks = sch.get_child_blocks(sch.get_sblock("root"))
        reductions = [b for b in blocks if rules.COMM_REDUCE in rules.iter_kinds(sch, b)]
        try:
            if not reductions:
                rules.schedule_injective(sch, blocks, shape)
            else:
                reduction_rules.schedule_reduction(sch, reductions[0], shape, depthwise_rule)
            return sch
        except Exception as e:
            if depthwise_rule:  # a depthwise convolution the depthwise rule does not fit: try the general one
                continue
            log.debug("%s: no default schedule (%s)", name, str(e).splitlines()[-1] if str(e) else type(e).__name__)
            return None
    return None
