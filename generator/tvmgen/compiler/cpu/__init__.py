"""The CPU pipeline: TVM's preparation, then schedules (tuned, else tvmgen's defaults).

TVM 0.27's default CPU pipeline lowers operators without scheduling them (no tiling, no
vectors, one thread). This pipeline keeps TVM's preparation passes, so a tuning database
made by ``tvmgen tune`` (which extracts its tasks from the same prepared module) matches,
then applies, in order:

1. the tuning database, when one is given (functions tuned by MetaSchedule);
2. tvmgen's default schedules (``compiler.schedules``) for the functions left;
3. TVM's lowering and finalisation, where the kernels that read a model input stop assuming
   64-byte alignment (``compiler.inputs``): callers pass numpy arrays without a copy.
"""

from __future__ import annotations

from pathlib import Path

from tvmgen.compiler.cpu import prefetch


def prepare_passes(target, layout: bool = True) -> list:
    """Relax -> fused TIR functions: the module both ``tune`` and ``compile`` schedule.
    ``layout=False`` leaves the model's layouts as they are (the fallback when the layout
    conversion breaks a model, see ``compiler.build``)."""
    from tvm.relax.backend.cpu_generic import pipeline as cpu

    from tvmgen.compiler.cpu import branches, divisions, schedules
    from tvmgen.compiler.int8 import int8_qdq, requantize

    # what one If branch alone needs computed in that branch (the importer computes both);
    # quantised convolutions and matmuls on the 8-bit values first: the layout passes fold the
    # weights' dequantize into float constants
    return (
        [branches.SinkIntoBranches()]
        + cpu.library_dispatch_passes(target)
        + [int8_qdq.QuantisedDotProducts(target), divisions.DivideByConstants()]
        # an 8-bit output's per-channel steps as one multiply-add (the layout passes do it too)
        + (schedules.layout_passes(target) if layout else [requantize.FoldRequantize()])
        + legalize_passes()
        + schedules.packed_weights_passes(target)
    )


def legalize_passes() -> list:
    """TVM's CPU legalization, with tvmgen's own where it has one (``schedules.legalize_map``)."""
    from tvm import relax

    from tvmgen.compiler.cpu import schedules

    return [
        relax.transform.LegalizeOps(schedules.legalize_map()),
        relax.transform.AnnotateTIROpPattern(),
        relax.transform.FoldConstant(),
        relax.transform.FuseOps(),
        relax.transform.FuseTIR(),
    ]


def schedule_passes(target, database=None, report: dict | None = None) -> list:
    """Schedules for the fused TIR functions: the tuning database first, defaults for the rest."""
    from tvmgen.compiler.cpu import schedules

    passes = []
    if database is not None:
        from tvm import relax

        passes.append(relax.transform.MetaScheduleApplyDatabase(enable_warning=False))
    passes.append(schedules.DefaultSchedules(target, report))
    # the prefetches address the packed weights: after they are folded
    return passes + schedules.fold_packed_weights_passes(target) + [prefetch.PrefetchNextWeights()]


def pipeline(target, tuning_db: Path | None = None, report: dict | None = None, layout: bool = True):
    """A Relax pipeline for ``relax.build`` on CPU targets; ``report`` gets which functions were
    tuned, given a default schedule, or left (see ``schedules.DefaultSchedules``)."""
    import tvm
    from tvm.relax.backend.cpu_generic import pipeline as cpu

    from tvmgen.compiler.cpu import branches, inputs
    from tvmgen.compiler.targets.database import open_database

    database = open_database(tuning_db, target) if tuning_db else None

    @tvm.transform.module_pass(opt_level=0, name="TvmgenCpuPipeline")
    def _pipeline(mod, _ctx):
        lower = cpu.dataflow_lower_passes(target)
        # After reshapes become views (an input's view is then read in place too), before the
        # calls are made explicit.
        at = next((i + 1 for i, p in enumerate(lower) if p.info.name == "RewriteDataflowReshape"), None)
        if at is not None:
            lower.insert(at, inputs.RelaxInputAlignment(report))
        finalize = cpu.finalize_passes(target)
        # TVM's memory plan shares storages between an If's branches (branches.own_branch_storages)
        plan = next((i + 1 for i, p in enumerate(finalize) if p.info.name == "StaticPlanBlockMemory"), None)
        if plan is not None:
            finalize.insert(plan, branches.OwnBranchStorages())
        passes = prepare_passes(target, layout) + schedule_passes(target, database, report) + lower + finalize
        with target:
            if database is None:
                return tvm.transform.Sequential(passes)(mod)
            with database:
                return tvm.transform.Sequential(passes)(mod)

    return _pipeline
