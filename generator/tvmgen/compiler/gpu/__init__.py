"""The GPU pipeline (OpenCL, generic family): TVM's ``gpu_generic`` pipeline, with a ``tvmgen tune``
database applied before dlight's default schedules.

TVM 0.27's generic GPU pipeline is: library dispatch, legalisation and fusion, dlight's
``ApplyDefaultSchedule`` (Matmul, GEMV, Reduction, GeneralReduction, Fallback), dataflow lowering,
finalisation. ``prepare_passes`` is everything before dlight (after tvmgen's lowering of transposed
convolutions): the module ``tvmgen tune --device opencl`` extracts its tasks from, so
``MetaScheduleApplyDatabase`` finds them here. Then, in order:

1. the tuning database, when one is given (functions tuned by MetaSchedule on the device);
2. dlight's default rules for the functions left (TVM's own GPU schedules, what an untuned build gets);
3. TVM's lowering and finalisation, and kernel names short enough for every driver.

Targets whose TVM pipeline is another one (Adreno's texture pipeline, CUDA's) keep TVM's own pipeline.
"""

from __future__ import annotations

import logging
from pathlib import Path

from tvmgen.compiler.gpu import limits

# desktop_matmul and is_desktop re-exported: the package's callers reach them as compiler.gpu.*
from tvmgen.compiler.gpu.matmul import desktop_matmul as desktop_matmul
from tvmgen.compiler.gpu.matmul import is_desktop as is_desktop
from tvmgen.compiler.gpu.matmul import matmul_rule
from tvmgen.compiler.targets.database import open_database
from tvmgen.compiler.targets.platforms import gpu_limits, tunable

log = logging.getLogger("tvmgen.compiler")

OVER_LIMITS = "over the GPU family's limits"  # a rule's schedule that needs more than a work-group has
HOST_LOOPS = "launches"  # a rule's schedule that leaves loops around a kernel in host code (``_try_rule``)


def prepare_passes(target, lower_conv_transpose: bool = True, report: dict | None = None) -> list:
    """Relax -> fused TIR functions, unscheduled: the module both ``tune`` and ``compile`` schedule (a model's
    float64 computed in float32: ``float64.demote``)."""
    from tvm.relax.backend.gpu_generic import pipeline as generic

    from tvmgen.compiler import conv_transpose, rewrites
    from tvmgen.compiler.gpu import float64
    from tvmgen.compiler.int8 import int8_qdq

    legalize = [p for p in generic.legalize_passes(target) if p.info.name != "ApplyDefaultSchedule"]
    return (
        [
            float64.demote_pass(report),
            rewrites.module_pass("TvmgenPreluUnflattened", _prelu_unflattened),
            int8_qdq.ShareDequantized(),
            rewrites.module_pass("TvmgenSinkRowReshapes", rewrites.sink_row_reshapes),  # residual / GELU in products
            rewrites.module_pass("TvmgenReshapeViews", rewrites.reshape_views),  # no copy kernels for them
            rewrites.module_pass("TvmgenSplitsAsSlices", rewrites.splits_as_slices),  # the parts read in place
            rewrites.module_pass("TvmgenTransposedOperands", _transposed_operands),
        ]
        + ([conv_transpose.lower_only_pass()] if lower_conv_transpose else [])
        + generic.library_dispatch_passes(target)
        + legalize
    )


def _transposed_operands(mod):
    """A product of a computed tensor's transpose (attention's ``Q x K^T``) as one kernel that reads the tensor
    transposed (TVM's FuseTransposeMatmul: an ``NT_matmul``) instead of a transpose kernel and a product: a
    launch less per attention. Constant operands keep theirs (folded into the weights as they are built)."""
    from tvm import ir, relax
    from tvm.relax.transform import fuse_transpose_matmul as ftm

    product, annotations, check = ftm._pattern()

    def computed(context) -> bool:
        return check(context) and not isinstance(context.annotated_expr["w"], ir.Constant)

    fuse = relax.transform.FuseOpsByPattern([("transpose_matmul_fuse", product, annotations, computed)], False)
    mod = fuse(mod)
    fuser = ftm._TransposeMatmulFuser(mod)
    for gv, func in mod.functions_items():
        if isinstance(func, relax.Function):
            fuser.builder_.update_func(gv, fuser.visit_expr(func))
    return fuser.builder_.get()


def _prelu_unflattened(mod):
    """TFLite's flattened PReLUs as channel-wise ones, which join their convolutions' epilogues (a kernel
    less each, rewrites.prelu_unflattened); modules without a PReLU are left as they are."""
    from tvm import relax

    from tvmgen.compiler import rewrites

    found = []
    for func in mod.functions.values():
        if isinstance(func, relax.Function):
            relax.analysis.post_order_visit(
                func.body,
                lambda e: found.append(e) if getattr(getattr(e, "op", None), "name", "") == "relax.nn.prelu" else None,
            )
    if not found:
        return mod
    return rewrites.prelu_unflattened(relax.transform.FoldConstant()(mod))


def default_rules(target=None) -> list:
    """dlight's GPU rules, in the order TVM's generic pipeline applies them; for an OpenCL target of
    the desktop family (``--gpu-family desktop``) the matmul/convolution rule takes the tile
    configuration dlight gives CUDA (``desktop_matmul``). OpenCL and Vulkan targets get tvmgen's rules
    too: products with few outputs and a long reduction split it across threads first (``split_k``;
    ``TVMGEN_GPU_SPLIT_K=0`` leaves them to dlight's Matmul), short reductions after the GEMV rule."""
    import os

    from tvm.s_tir import dlight as dl

    from tvmgen.compiler.gpu.full_reduction import full_reduction_rule, late_row_reduction_rule, row_reduction_rule
    from tvmgen.compiler.gpu.split_k import split_k_rule

    matmul = matmul_rule(target)
    ours = target is None or target.kind.name in ("opencl", "vulkan")
    split = [split_k_rule()] if ours and os.environ.get("TVMGEN_GPU_SPLIT_K", "1") != "0" else []
    small = [row_reduction_rule(), small_reductions(), full_reduction_rule()] if ours else []
    rows = [late_row_reduction_rule()] if ours else []  # what dlight's reduction rules leave to Fallback
    return [*split, matmul, vulkan_gemv(), *small, dl.gpu.Reduction(), vulkan_long_rows(), *rows, dl.gpu.Fallback()]


def vulkan_gemv():
    """dlight's GEMV rule (matrix-vector products: the squeeze-excitation 1 x 1 convolutions on 1 x 1
    spatial), configured for a Vulkan target as dlight configures it for a generic OpenCL one: one row
    of 64 threads per output, no staging of the vector in shared memory, no 4-lane vectors. dlight's
    Vulkan configuration (4 x 32 or 16 x 32 threads, the vector staged in shared memory, 4-lane loads)
    made EfficientNet-B0's and MobileNetV3-Small's GEMVs 7-27x slower than OpenCL's through tvmgen's
    GLSL on NVIDIA's Vulkan driver (docs/vulkan.md). ``TVMGEN_VULKAN_GEMV=dlight`` keeps dlight's Vulkan one."""
    import os

    from tvm.s_tir import dlight as dl

    class VulkanGEMV(dl.gpu.GEMV):
        def apply(self, func, target, tunable):
            if target.kind.name == "vulkan" and os.environ.get("TVMGEN_VULKAN_GEMV", "opencl") != "dlight":
                target = _as_opencl(target)
            return super().apply(func, target, tunable)

    return VulkanGEMV()


LONG_ROW = 2048  # a normalisation over rows this long or longer: work-groups of 256 on Vulkan too


def vulkan_long_rows():
    """dlight's GeneralReduction (a softmax or a layer norm: a work-group per row), with the 256 threads a
    row it gives OpenCL and CUDA also for a Vulkan target's rows of LONG_ROW values or more: for other targets
    dlight takes 64, and a CTC recognizer's softmax over 6,625 classes then ran 2.7x longer through tvmgen's
    GLSL on NVIDIA's Vulkan driver than OpenCL's (21 against 8 us); shorter rows (a layer norm of 64 values)
    keep 64, where more threads would idle."""
    from tvm.s_tir import dlight as dl

    # dlight's rule under its own name: the build's messages name the rule that scheduled or failed on a kernel
    class GeneralReduction(dl.gpu.GeneralReduction):
        def apply(self, func, target, tunable):
            if target.kind.name == "vulkan" and _longest_reduction(func) >= LONG_ROW:
                target = _as_opencl(target)
            return super().apply(func, target, tunable)

    return GeneralReduction()


def _as_opencl(target):
    """An OpenCL target with a Vulkan target's thread limits: what a dlight rule configures for OpenCL, it
    then configures for that Vulkan target."""
    from tvm.target import Target

    return Target(
        {
            "kind": "opencl",
            "max_num_threads": int(target.attrs["max_num_threads"]),
            "thread_warp_size": int(target.attrs["thread_warp_size"]),
        }
    )


def _longest_reduction(func) -> int:
    """The most values one output of ``func`` reduces (0 without a reduction of known extent)."""
    sch, blocks = _root_blocks(func)
    extents = [_extents(sch.get(b)) for b in blocks]
    return max((e["reduce"] for e in extents if e is not None and e["reduces"]), default=0)


def _extents(block) -> dict | None:
    """A block's spatial and reduction extents (products of its iterators'), and whether it reduces; None where
    an extent is not a known number or an iterator is neither spatial nor a reduction."""
    from tvm import tirx

    extents = {"spatial": 1, "reduce": 1, "reduces": False}
    for iv in block.iter_vars:
        kind = {tirx.IterVar.DataPar: "spatial", tirx.IterVar.CommReduce: "reduce"}.get(int(iv.iter_type))
        if kind is None or not isinstance(iv.dom.extent, tirx.IntImm):
            return None
        extents[kind] *= int(iv.dom.extent)
        extents["reduces"] |= kind == "reduce"
    return extents


SMALL_REDUCTION = 64  # reduction extents up to this are summed by one thread (a 7 x 7 window)


def small_reductions():
    """A dlight rule for functions whose reductions are short (depthwise convolutions: 9 or 25
    products per output; pooling windows; a 7 x 7 global average): one thread per output, the
    reduction a loop in that thread, the padding and the epilogue inlined (dlight's Fallback
    schedule). dlight's Reduction / GeneralReduction rules, which such functions reach otherwise,
    give every output a work-group of 256 threads that add 9 products through a tree in local
    memory, with a barrier per level: CUDA does that tree with warp shuffles, OpenCL with local
    memory, and the depthwise convolutions were where MobileNets' OpenCL builds lost most to CUDA's on
    the same GPU. OpenCL targets only (phones included); CUDA keeps TVM's schedules, the reference
    the OpenCL builds are measured against."""
    import os

    from tvm import tirx
    from tvm.s_tir import dlight as dl

    class SmallReductions(dl.gpu.Fallback):
        def apply(self, func, target, tunable):
            if not isinstance(func, tirx.PrimFunc) or not _short_reductions(func):
                return None
            if os.environ.get("TVMGEN_GPU_FUSED_REDUCTIONS", "1") != "0":
                sch = fused_short_reduction(func, target)
                if sch is not None:
                    return sch
            return super().apply(func, target, tunable)

    return SmallReductions()


def fused_short_reduction(func, target):
    """One kernel for a short reduction and its epilogue (a depthwise convolution with its bias and
    activation, a pooling window with its division): one thread per output, which sums its window
    into a register (a ``local`` buffer) and applies the epilogue before its one store. dlight's
    Fallback binds each block it cannot inline to its own threads, so a reduction whose epilogue
    reads the sum twice (hard-swish: ``x * clip(x + 3, 0, 6) / 6``; a mean's division after its sum)
    became two kernels, the first adding its products into global memory and the second reading them
    back: on MobileNetV3-Small 11 of its 52 functions, each a dispatch of its own on the GPU. None
    when the function is not one reduction followed by at most one elementwise block over the same
    outputs (Fallback schedules those)."""
    import re

    from tvm import s_tir
    from tvm.s_tir.dlight import base
    from tvm.s_tir.dlight.analysis import normalize_prim_func
    from tvm.s_tir.dlight.base import try_inline

    try:
        sch = s_tir.Schedule(func)
        infos = normalize_prim_func(sch)
        if infos is None:
            return None
        infos = try_inline(sch, infos)
        reductions = [i for i in infos if "R" in i.dom_kind()]
        rest = [i for i in infos if "R" not in i.dom_kind()]
        if len(reductions) != 1 or len(rest) > 1 or not re.fullmatch("S*R+", reductions[0].dom_kind()):
            return None
        red = reductions[0].block_rv
        n_reduce = len(reductions[0].dom_kind()) - reductions[0].dom_kind().index("R")
        spatial = 1
        for iv in sch.get(red).iter_vars[: len(sch.get(red).iter_vars) - n_reduce]:
            spatial *= int(iv.dom.extent)
        if rest:
            epi = rest[0].block_rv
            consumers = [sch.get(c) for c in sch.get_consumers(red)]
            if len(consumers) != 1 or not consumers[0].same_as(sch.get(epi)):
                return None
            sch.set_scope(red, 0, "local")
        else:
            epi = sch.cache_write(red, 0, "local")
        loops = sch.get_loops(epi)
        outputs = 1
        for loop in loops:
            outputs *= int(sch.get(loop).extent)
        if outputs != spatial:  # an epilogue that broadcasts the sums would recompute them per output
            return None
        bx, tx = sch.split(sch.fuse(*loops), factors=[None, base.max_threads_per_block(target)])
        sch.bind(bx, "blockIdx.x")
        sch.bind(tx, "threadIdx.x")
        sch.compute_at(red, tx, preserve_unit_loops=True)
        sch.decompose_reduction(red, sch.get_loops(red)[-n_reduce])
        return sch
    except Exception as e:  # a structure compute_at or decompose_reduction cannot take (seg_head's
        # transposed convolution's 1 x 1 taps: "not a reduction block"): Fallback's schedule, as before
        log.debug(
            "fused short reduction not applied to %s: %s", func.attrs.get("global_symbol") if func.attrs else "", e
        )
        return None


def _root_blocks(func):
    """(a Schedule of ``func``, the blocks under its root); (None, no blocks) when it is not a block function."""
    from tvm import s_tir

    try:
        sch = s_tir.Schedule(func)
        return sch, sch.get_child_blocks(sch.get_sblock("root"))
    except Exception:
        return None, []


def _short_reductions(func) -> bool:
    """Whether ``func`` has reductions and each covers at most SMALL_REDUCTION elements per output,
    with enough outputs (at least 256) to keep a GPU's threads busy, and no block after them writes more
    elements than they have outputs (a normalisation)."""
    sch, blocks = _root_blocks(func)  # no blocks: no reductions
    found = False
    reduced, widest = [], 0
    for b in blocks:
        extents = _extents(sch.get(b))
        if extents is None:
            return False
        if extents["reduces"]:
            if extents["reduce"] > SMALL_REDUCTION or extents["spatial"] < 256:
                return False
            found = True
            reduced.append(extents["spatial"])
        elif reduced:  # after a reduction (a padding before it may be wider than its outputs)
            widest = max(widest, extents["spatial"])
    # a normalisation (layer norm: a row's mean and variance, then every element of the row) writes more
    # outputs than it has sums: one thread per sum would be a kernel per reduction and one for the
    # elements; dlight's GeneralReduction makes it one kernel, a work-group per row
    return found and widest <= max(reduced, default=0)


def default_schedule(mod, target):
    """dlight's schedule of a task (an IRModule with ``main``), as ``compile`` gives it without a
    database: a traced ``Schedule`` (its trace replays into a tuning record), or None."""
    from tvm.s_tir.dlight.base.transform import _apply_rules

    with target:
        space = _apply_rules(mod["main"], target, default_rules(target), tunable=False)
    return space[0] if space else None


def apply_rules(*rules, report: dict | None = None, name: str = "TvmgenApplyRules"):
    """dlight's ``ApplyDefaultSchedule``, one kernel at a time and checked.

    - A rule that raises on a kernel (dlight's Matmul rule on some convolution epilogues: "consumers
      of the cache-write stage that are not properly inlined"; its Reduction rule on a 0-d mean:
      rfactor's "block_realize == old_block_realize") is passed over for that kernel alone.
    - A schedule that leaves blocks outside the GPU's threads is no schedule: the Adreno Conv2d rule
      leaves a GELU epilogue (add, divide, erf, add, multiply, multiply: the convolution's result read
      twice) as loops on the host, where its texture stores cannot be compiled ("unknown intrinsic
      tirx.texture2d_store").
    - Each rule is tried on the kernel as it is, then with its elementwise epilogue inlined into one
      block (``inline_epilogue``), before the next rule.
    - A schedule over the GPU family's limits (``limits.needs`` against ``platforms.GPU_LIMITS``: shared
      memory and threads per work-group) is passed over too: the driver would refuse the program, or a
      dispatch lose the device.
    Kernels a rule failed on go to ``report["rule_failures"]`` ({kernel, rule, error, scheduled_by}), each
    kernel's work-group needs to ``report["work_groups"]``; a kernel no rule schedules is a CompileError
    naming it."""
    import tvm
    from tvm import tirx
    from tvm.target import Target

    from tvmgen.core.errors import CompileError

    @tvm.transform.module_pass(opt_level=0, name=name)
    def _apply(mod, _ctx):
        failures = report.setdefault("rule_failures", []) if report is not None else []
        # kernel -> limits.Needs of its schedule (the last rule tried: the one kept)
        work_groups = report.setdefault("work_groups", {}) if report is not None else {}
        for gv, func in list(mod.functions_items()):
            if not isinstance(func, tirx.PrimFunc) or (func.attrs is not None and func.attrs.get("tirx.is_scheduled")):
                continue
            target = (func.attrs.get("target") if func.attrs is not None else None) or Target.current(allow_none=False)
            variants = [func]
            failed: dict = {}
            scheduled = None
            for rule in rules:
                rule_name = type(rule).__name__
                for variant in variants:
                    scheduled = _try_rule(rule, variant, target, failed, gv.name_hint, work_groups)
                    if scheduled is not None:
                        break
                    if variant is func and len(variants) == 1 and rule_name in failed:
                        inlined = inline_epilogue(func)
                        if inlined is not None:
                            variants.append(inlined)
                if scheduled is not None:
                    mod[gv] = scheduled.with_attr("tirx.is_scheduled", True)
                    failures += [
                        {"kernel": gv.name_hint, "rule": r, "error": e, "scheduled_by": rule_name}
                        for r, e in failed.items()
                        if r != rule_name
                    ]
                    break
            if scheduled is None and failed:
                raise CompileError(
                    f"no GPU schedule for kernel {gv.name_hint}: "
                    + "; ".join(f"{_owner(r)} {r} rule failed ({e})" for r, e in failed.items()),
                    "build it for --device cpu, or report it with the log file",
                )
        return mod

    return _apply


def _try_rule(rule, func, target, failed: dict, kernel: str, work_groups: dict):
    """``rule``'s schedule of ``func`` when it applies, binds every block to GPU threads and stays within the
    target's GPU family's limits (``limits.needs``: noted in ``work_groups`` by kernel), else None; a failure
    is noted in ``failed`` (rule name -> why)."""
    rule_name = type(rule).__name__
    try:
        space = rule.apply(func, target, False)
    except Exception as e:
        failed[rule_name] = (str(e).strip().splitlines() or [type(e).__name__])[0][:200]
        log.info("%s %s rule failed on %s: %s", _owner(rule_name), rule_name, kernel, e)
        return None
    if space is None:
        return None
    sch = space[0] if isinstance(space, list) else space
    unbound, looped = _blocks_outside_threads(sch)
    if unbound or looped:
        failed[rule_name] = (
            f"left {len(unbound)} block(s) outside the GPU threads ({', '.join(unbound[:3])})"
            if unbound
            else f"{HOST_LOOPS} {', '.join(looped[:3])} from loops on the host (a kernel launch per iteration)"
        )
        log.info("%s %s rule on %s: %s", _owner(rule_name), rule_name, kernel, failed[rule_name])
        return None
    family = gpu_limits(target)
    need = limits.needs(sch.mod["main"]) if family is not None else None
    over = need.over(family) if need is not None and family is not None else ""
    if need is not None:
        work_groups[kernel] = need
    if over:  # the driver would refuse it, or a dispatch lose the device: the next rule schedules it
        failed[rule_name] = f"{OVER_LIMITS}: {over}"
        log.info("%s %s rule on %s: %s", _owner(rule_name), rule_name, kernel, failed[rule_name])
        return None
    failed.pop(rule_name, None)
    return sch.mod["main"]


def _blocks_outside_threads(sch) -> tuple[list[str], list[str]]:
    """Names of the blocks of a scheduled function under no thread-bound loop (they would run on the host),
    and of those under one with a loop of more than one iteration outside it: that loop stays in host code
    and launches the kernel once per iteration (dlight's GeneralReduction on a reduction to one value: a
    launch per element reduced)."""
    from tvm import tirx

    names, looped, stack = [], [], list(sch.get_child_blocks(sch.get_sblock("root")))
    while stack:
        block = stack.pop()
        loops = [sch.get(loop) for loop in sch.get_loops(block)]
        bound = [i for i, loop in enumerate(loops) if loop.kind == tirx.ForKind.THREAD_BINDING]
        if not bound:
            names.append(sch.get(block).name_hint)
            continue
        if any(not (isinstance(loop.extent, tirx.IntImm) and int(loop.extent) == 1) for loop in loops[: bound[0]]):
            looped.append(sch.get(block).name_hint)
        stack += list(sch.get_child_blocks(block))
    return names, looped


def inline_epilogue(func):
    """``func`` with every elementwise block that another block reads inlined into its readers (a
    fused epilogue becomes one block after the reduction), or None when there is none to inline."""
    from tvm import tirx

    sch, blocks = _root_blocks(func)  # no blocks: nothing to inline
    changed = False
    for block in blocks:
        if any(int(iv.iter_type) != tirx.IterVar.DataPar for iv in sch.get(block).iter_vars) or not sch.get_consumers(
            block
        ):
            continue
        try:
            sch.compute_inline(block)
            changed = True
        except Exception:
            continue
    return sch.mod["main"] if changed else None


# rules tvmgen writes itself (the others are dlight's, some configured by tvmgen)
OWN_RULES = ("SplitK", "SmallReductions", "Conv2dEpilogue", "TextureReduction")


def _owner(rule: str) -> str:
    return "tvmgen's" if rule in OWN_RULES else "dlight's"


def rule_failures_summary(failures: list[dict]) -> list[str]:
    """Lines for the compile output: which kernels a failing rule left to a later (slower) rule."""
    by_rule: dict = {}
    lines = []
    for f in failures:
        if f["error"].startswith((OVER_LIMITS, HOST_LOOPS)):  # each said with what it needed or did
            cost = " (one thread per output, no tiling: slower)" if f["scheduled_by"] == "Fallback" else ""
            verb = "" if f["error"].startswith(HOST_LOOPS) else "is "
            lines.append(
                f"{_owner(f['rule'])} {f['rule']} schedule of {f['kernel']} {verb}{f['error']}: scheduled by "
                f"{f['scheduled_by']} instead{cost}"
            )
            continue
        by_rule.setdefault((f["rule"], f["scheduled_by"]), []).append(f["kernel"])
    for (rule, by), kernels in sorted(by_rule.items()):
        shown = ", ".join(kernels[:3]) + (f", +{len(kernels) - 3} more" if len(kernels) > 3 else "")
        cost = {
            "Fallback": " (one thread per output, no tiling: slower)",
            "Conv2dEpilogue": " (the convolution as dlight schedules it, its epilogue a second pass over memory)",
        }.get(by, "")
        by = f"tvmgen's {by}" if by in OWN_RULES else by
        lines.append(
            f"{_owner(rule)} {rule} rule failed on {len(kernels)} kernel(s) ({shown}): scheduled by {by} instead{cost}"
        )
    return lines


def work_groups_record(work_groups: dict, target) -> dict:
    """The largest work-group needs of a build (``report["work_groups"]``: kernel -> ``limits.Needs``) and the
    target's GPU family's limits, as kernels.json keeps them."""
    family = gpu_limits(target)
    shared = max(work_groups.items(), key=lambda kv: kv[1].shared_bytes)
    threads = max(work_groups.items(), key=lambda kv: kv[1].threads)
    return {
        "shared_bytes": shared[1].shared_bytes,
        "shared_kernel": shared[0],
        "threads": threads[1].threads,
        "threads_kernel": threads[0],
        "limits": None
        if family is None
        else {"family": family.name, "shared_bytes": family.shared_bytes, "threads": family.threads},
    }


def work_groups_summary(record: dict) -> str:
    """The compile output's line on a ``work_groups_record``."""
    line = (
        f"work-groups: at most {record['shared_bytes'] / 1024:.1f} KB of shared memory ({record['shared_kernel']}) "
        f"and {record['threads']} threads ({record['threads_kernel']})"
    )
    family = record.get("limits")
    if family:
        line += f"; the {family['family']} limits: {family['shared_bytes'] // 1024} KB, {family['threads']} threads"
    return line


def _scheduled(mod) -> set[str]:
    import tvm

    return {
        gv.name_hint
        for gv, f in mod.functions.items()
        if isinstance(f, tvm.tirx.PrimFunc) and f.attrs is not None and f.attrs.get("tirx.is_scheduled", False)
    }


def _unscheduled(mod) -> set[str]:
    import tvm

    return {gv.name_hint for gv, f in mod.functions.items() if isinstance(f, tvm.tirx.PrimFunc)} - _scheduled(mod)


def schedule_passes(target, database=None, report: dict | None = None) -> list:
    """The tuning database first (when given), then dlight's rules; ``report`` gets
    ``{"tuned", "scheduled", "left"}`` (names) when a database is given, as the CPU pipeline reports."""
    import tvm
    from tvm import relax

    if database is None:
        return [apply_rules(*default_rules(target), report=report)]
    seen: dict = {}

    @tvm.transform.module_pass(opt_level=0, name="TvmgenGpuBeforeDatabase")
    def _before(mod, _ctx):
        seen["before"] = _unscheduled(mod)
        return mod

    @tvm.transform.module_pass(opt_level=0, name="TvmgenGpuFromDatabase")
    def _tuned(mod, _ctx):
        seen["tuned"] = seen["before"] & _scheduled(mod)
        seen["after"] = _unscheduled(mod)
        return mod

    @tvm.transform.module_pass(opt_level=0, name="TvmgenGpuDefaults")
    def _defaults(mod, _ctx):
        left = _unscheduled(mod)
        done = seen["after"] - left
        log.info(
            "GPU schedules: %d from the tuning database, %d dlight defaults, %d left",
            len(seen["tuned"]),
            len(done),
            len(left),
        )
        if report is not None:
            report.update(
                tuned=sorted(seen["tuned"]), scheduled=sorted(done), left=sorted(left), defaults="dlight defaults"
            )
        return mod

    return [
        _before,
        relax.transform.MetaScheduleApplyDatabase(enable_warning=False),
        _tuned,
        apply_rules(*default_rules(target), report=report),
        _defaults,
    ]


def pipeline(target, tuning_db: Path | None = None, report: dict | None = None, lower_conv_transpose: bool = True):
    """A Relax pipeline for ``relax.build`` on GPU targets: ``prepare_passes``, the database and
    dlight (``schedule_passes``), TVM's lowering, short kernel names. Targets TVM builds with
    another pipeline (``tunable`` false) get that one, the database unused."""
    import tvm
    from tvm import relax
    from tvm.relax.backend.gpu_generic import pipeline as generic

    from tvmgen.compiler import conv_transpose
    from tvmgen.compiler.gpu import kernel_names

    if not tunable(target) and target.kind.name != "vulkan":  # Vulkan: tvmgen's code generator, these schedules
        if tuning_db:
            log.info("the tuning database is not used for %s: TVM builds it with its own pipeline", target.kind.name)
        own = cuda_pipeline(target, report) if target.kind.name == "cuda" else relax.get_default_pipeline(target)
        return tvm.transform.Sequential(
            ([conv_transpose.lower_only_pass()] if lower_conv_transpose else [])
            + [own, kernel_names.short_kernel_names()]
        )
    database = open_database(tuning_db, target) if tuning_db else None

    @tvm.transform.module_pass(opt_level=0, name="TvmgenGpuPipeline")
    def _pipeline(mod, _ctx):
        passes = (
            prepare_passes(target, lower_conv_transpose, report)
            + schedule_passes(target, database, report)
            + generic.dataflow_lower_passes(target)
            + generic.finalize_passes(target)
        )
        with target:
            if database is None:
                return tvm.transform.Sequential(passes)(mod)
            with database:
                return tvm.transform.Sequential(passes)(mod)

    return tvm.transform.Sequential([_pipeline, kernel_names.short_kernel_names()])


def cuda_pipeline(target, report: dict | None = None):
    """TVM's CUDA pipeline with its dlight rules (the same, in the same order: TVM's own CUDA schedules) applied
    by ``backend_pipeline``: a rule that raises on a kernel (the Reduction rule's rfactor on a 0-d mean:
    "block_realize == old_block_realize") is passed over for that kernel alone, and said, instead of failing
    the build."""
    from tvm.relax.backend.cuda import pipeline as cuda
    from tvm.s_tir import dlight as dl

    rules = [dl.gpu.Matmul(), dl.gpu.GEMV(), dl.gpu.Reduction(), dl.gpu.GeneralReduction(), dl.gpu.Fallback()]
    return backend_pipeline(cuda, target, rules, report, name="TvmgenCudaPipeline")


def backend_pipeline(backend, target, rules: list, report: dict | None = None, first=(), name="TvmgenBackend"):
    """TVM's pipeline of one backend (``backend``: a module such as ``tvm.relax.backend.cuda.pipeline`` or
    ``...gpu_generic.pipeline``: library dispatch, legalization ending in dlight's ApplyDefaultSchedule,
    dataflow lowering, finalization) with that ApplyDefaultSchedule replaced by ``apply_rules(*rules)``, one
    kernel at a time and checked; ``first``: passes run before all of it."""
    import tvm

    legalize = [p for p in backend.legalize_passes(target) if p.info.name != "ApplyDefaultSchedule"]
    schedule = apply_rules(*rules, report=report)

    @tvm.transform.module_pass(opt_level=0, name=name)
    def _pipeline(mod, _ctx):
        with target:
            return tvm.transform.Sequential(
                list(first)
                + backend.library_dispatch_passes(target)
                + legalize
                + [schedule]
                + backend.dataflow_lower_passes(target)
                + backend.finalize_passes(target)
            )(mod)

    return _pipeline
