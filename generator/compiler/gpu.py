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

log = logging.getLogger("tvmgen.compiler")


def tunable(target) -> bool:
    """Whether ``target`` is built with TVM's generic GPU pipeline here (so a database applies):
    OpenCL, except the Adreno family, which TVM gives a pipeline of its own."""
    return target.kind.name == "opencl" and "adreno" not in [str(k) for k in target.keys]


def prepare_passes(target, lower_conv_transpose: bool = True) -> list:
    """Relax -> fused TIR functions, unscheduled: the module both ``tune`` and ``compile`` schedule."""
    from tvm.relax.backend.gpu_generic import pipeline as generic

    from tvmgen.compiler import conv_transpose

    legalize = [p for p in generic.legalize_passes(target) if p.info.name != "ApplyDefaultSchedule"]
    return (([conv_transpose.lower_only_pass()] if lower_conv_transpose else [])
            + generic.library_dispatch_passes(target) + legalize)


def default_rules(target=None) -> list:
    """dlight's GPU rules, in the order TVM's generic pipeline applies them; for an OpenCL target of
    the desktop family (``--gpu-family desktop``) the matmul/convolution rule takes the tile
    configuration dlight gives CUDA (``desktop_matmul``)."""
    from tvm.s_tir import dlight as dl

    matmul = desktop_matmul() if is_desktop(target) else dl.gpu.Matmul()
    small = [small_reductions()] if target is None or target.kind.name == "opencl" else []
    return [matmul, dl.gpu.GEMV(), *small, dl.gpu.Reduction(), dl.gpu.GeneralReduction(), dl.gpu.Fallback()]


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
    from tvm import tirx
    from tvm.s_tir import dlight as dl

    class SmallReductions(dl.gpu.Fallback):
        def apply(self, func, target, tunable):
            if not isinstance(func, tirx.PrimFunc) or not _short_reductions(func):
                return None
            return super().apply(func, target, tunable)

    return SmallReductions()


def _short_reductions(func) -> bool:
    """Whether ``func`` has reductions and each covers at most SMALL_REDUCTION elements per output,
    with enough outputs (at least 256) to keep a GPU's threads busy."""
    from tvm import s_tir, tirx

    try:
        sch = s_tir.Schedule(func)
        blocks = sch.get_child_blocks(sch.get_sblock("root"))
    except Exception:  # noqa: BLE001 - not a block function: not ours
        return False
    found = False
    for b in blocks:
        block = sch.get(b)
        extents = {"spatial": 1, "reduce": 1}
        for iv in block.iter_vars:
            if not isinstance(iv.dom.extent, tirx.IntImm):
                return False
            kind = {tirx.IterVar.DataPar: "spatial", tirx.IterVar.CommReduce: "reduce"}.get(int(iv.iter_type))
            if kind is None:
                return False
            extents[kind] *= int(iv.dom.extent)
        if any(int(iv.iter_type) == tirx.IterVar.CommReduce for iv in block.iter_vars):
            if extents["reduce"] > SMALL_REDUCTION or extents["spatial"] < 256:
                return False
            found = True
    return found


def is_desktop(target) -> bool:
    return target is not None and target.kind.name == "opencl" and str(target.attrs.get("device", "")) == "desktop"


def desktop_matmul():
    """dlight's Matmul rule (matmuls and convolutions), configured for an OpenCL target as dlight
    configures it for CUDA: 8 x 16 threads of 4 x 4 results, 16-deep reduction steps staged in local
    memory, pairs of values per load. For OpenCL dlight has only an Adreno configuration and a
    conservative default (8 x 8 threads, 8-deep steps, no vectors), which is what the generic family
    gets; on an NVIDIA H100 through NVIDIA's OpenCL the CUDA configuration made SqueezeNet's
    convolutions 1.5x faster (see the README's GPU section)."""
    from tvm.s_tir import dlight as dl
    from tvm.target import Target

    class DesktopMatmul(dl.gpu.Matmul):
        def get_configs(self, target):
            if target.kind.name == "opencl":
                return super().get_configs(Target({"kind": "cuda"}))
            return super().get_configs(target)

    return DesktopMatmul()


def default_schedule(mod, target):
    """dlight's schedule of a task (an IRModule with ``main``), as ``compile`` gives it without a
    database: a traced ``Schedule`` (its trace replays into a tuning record), or None."""
    from tvm.s_tir.dlight.base.transform import _apply_rules

    with target:
        space = _apply_rules(mod["main"], target, default_rules(target), tunable=False)
    return space[0] if space else None


def _scheduled(mod) -> set[str]:
    import tvm

    return {gv.name_hint for gv, f in mod.functions.items()
            if isinstance(f, tvm.tirx.PrimFunc) and f.attrs is not None and f.attrs.get("tirx.is_scheduled", False)}


def _unscheduled(mod) -> set[str]:
    import tvm

    return {gv.name_hint for gv, f in mod.functions.items() if isinstance(f, tvm.tirx.PrimFunc)} - _scheduled(mod)


def schedule_passes(target, database=None, report: dict | None = None) -> list:
    """The tuning database first (when given), then dlight's rules; ``report`` gets
    ``{"tuned", "scheduled", "left"}`` (names) when a database is given, as the CPU pipeline reports."""
    import tvm
    from tvm import relax
    from tvm.s_tir import dlight as dl

    if database is None:
        return [dl.ApplyDefaultSchedule(*default_rules(target))]
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
        log.info("GPU schedules: %d from the tuning database, %d dlight defaults, %d left", len(seen["tuned"]),
                 len(done), len(left))
        if report is not None:
            report.update(tuned=sorted(seen["tuned"]), scheduled=sorted(done), left=sorted(left),
                          defaults="dlight defaults")
        return mod

    return [_before, relax.transform.MetaScheduleApplyDatabase(enable_warning=False), _tuned,
            dl.ApplyDefaultSchedule(*default_rules(target)), _defaults]


def pipeline(target, tuning_db: Path | None = None, report: dict | None = None, lower_conv_transpose: bool = True):
    """A Relax pipeline for ``relax.build`` on GPU targets: ``prepare_passes``, the database and
    dlight (``schedule_passes``), TVM's lowering, short kernel names. Targets TVM builds with
    another pipeline (``tunable`` false) get that one, the database unused."""
    import tvm
    from tvm import relax
    from tvm.relax.backend.gpu_generic import pipeline as generic

    from tvmgen.compiler import conv_transpose, rewrites

    if not tunable(target):
        if tuning_db:
            log.info("the tuning database is not used for %s: TVM builds it with its own pipeline", target.kind.name)
        return tvm.transform.Sequential(([conv_transpose.lower_only_pass()] if lower_conv_transpose else [])
                                        + [relax.get_default_pipeline(target), rewrites.short_kernel_names()])
    from tvmgen import tune

    database = tune.open_database(tuning_db, target) if tuning_db else None

    @tvm.transform.module_pass(opt_level=0, name="TvmgenGpuPipeline")
    def _pipeline(mod, _ctx):
        passes = (prepare_passes(target, lower_conv_transpose) + schedule_passes(target, database, report)
                  + generic.dataflow_lower_passes(target) + generic.finalize_passes(target))
        with target:
            if database is None:
                return tvm.transform.Sequential(passes)(mod)
            with database:
                return tvm.transform.Sequential(passes)(mod)

    return tvm.transform.Sequential([_pipeline, rewrites.short_kernel_names()])
