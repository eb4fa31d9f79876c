"""Model file -> artifact directory: import, build with TVM, export, write the manifest."""

from __future__ import annotations

import logging
from dataclasses import dataclass
from pathlib import Path

from tvmgen import __version__, artifact
from tvmgen.compiler import export as exporter
from tvmgen.compiler.platforms import DL_DEVICE_TYPES, Platform, make_target, target_dict
from tvmgen.errors import CompileError, TvmgenError
from tvmgen.frontends.base import ImportedModel, TensorSpec
from tvmgen.log import console, step

log = logging.getLogger("tvmgen.compiler")


@dataclass
class BuildOptions:
    platform: Platform
    device: str
    gpu_family: str = "generic"
    separate_params: bool = False
    objects_only: bool = False
    tuning_db: Path | None = None  # a `tvmgen tune` database (CPU targets)
    schedules: bool = True  # False: TVM's own pipeline, unscheduled on CPU (for comparisons)
    runtime_needs: dict | None = None  # what the device runtime needs beyond TVM's core (NNAPI), for the manifest


def output_specs(mod, names: list[str]) -> list[TensorSpec]:
    """Output shapes and dtypes from main's return type, named after the model's outputs."""
    from tvm import relax

    ret = mod["main"].ret_ty
    fields = list(ret.fields) if isinstance(ret, relax.TupleType) else [ret]
    specs = []
    for i, f in enumerate(fields):
        if not isinstance(f, relax.TensorType) or f.shape is None:
            raise CompileError(f"output {i} of the model is not a tensor of known shape ({f})",
                               "tvmgen handles models whose outputs are tensors with fixed shapes")
        shape = tuple(int(d) for d in f.shape.values)
        name = names[i] if i < len(names) else f"output_{i}"
        specs.append(TensorSpec(name, shape, str(f.dtype)))
    return specs


def build_executable(imported: ImportedModel, opts: BuildOptions, report: dict | None = None):
    """Run TVM: bind or keep weights, lower with the target's pipeline, build. CPU builds fill
    ``report`` with the functions tuned, given tvmgen's default schedules, or left unscheduled."""
    from tvm import relax

    target = make_target(target_dict(opts.platform, opts.device, opts.gpu_family))
    mod = imported.mod
    if not opts.separate_params and imported.params:
        weights = mod["main"].params[len(imported.inputs):]
        mod = relax.transform.BindParams("main", dict(zip(weights, imported.params)))(mod)
    try:
        with target:
            pipeline = _pipeline(target, opts, report)
        return relax.build(mod, target, relax_pipeline=pipeline,
                           system_lib=True if opts.platform.system_lib else None)
    except TvmgenError:  # tvmgen's own (e.g. a tuning database without this target): already says what to do
        raise
    except Exception as e:
        lines = [ln for ln in str(e).splitlines() if ln.strip()]
        raise CompileError(
            f"TVM failed to build for {opts.platform.name}/{opts.device}: {type(e).__name__}: "
            f"{lines[-1] if lines else ''}",
            "run with -vv and see the log file for TVM's full message; try --device cpu to isolate a GPU scheduling problem",
        ) from e


def _pipeline(target, opts: BuildOptions, report: dict | None):
    from tvm import relax

    from tvmgen.compiler import cpu

    if opts.device == "metal":
        return metal_pipeline(target)
    if target.kind.name == "llvm" and opts.schedules:
        return cpu.pipeline(target, opts.tuning_db, report)
    return relax.get_default_pipeline(target)


def metal_pipeline(target):
    """TVM's generic GPU pipeline without dlight's Matmul rule.

    In TVM 0.27 that rule segfaults the compiler on Metal targets (seen on any model with a
    dense/conv layer); the remaining rules (GEMV, reductions, fallback) schedule everything.
    """
    import tvm
    from tvm.relax.backend.gpu_generic import pipeline as generic
    from tvm.s_tir import dlight as dl

    legalize = [p for p in generic.legalize_passes(target) if p.info.name != "ApplyDefaultSchedule"]
    schedule = dl.ApplyDefaultSchedule(dl.gpu.GEMV(), dl.gpu.Reduction(), dl.gpu.GeneralReduction(),
                                       dl.gpu.Fallback())

    @tvm.transform.module_pass(opt_level=0, name="TvmgenMetalPipeline")
    def _pipeline(mod, _ctx):
        with target:
            return tvm.transform.Sequential(
                generic.library_dispatch_passes(target) + legalize + [schedule]
                + generic.dataflow_lower_passes(target) + generic.finalize_passes(target))(mod)

    return _pipeline


def schedule_summary(report: dict) -> str:
    """One line: where the CPU kernels' schedules came from."""
    parts = []
    if report.get("tuned"):
        parts.append(f"{len(report['tuned'])} from the tuning database")
    parts.append(f"{len(report.get('scheduled', []))} tvmgen defaults")
    left = report.get("left", [])
    if left:
        shown = ", ".join(left[:4]) + (f", +{len(left) - 4} more" if len(left) > 4 else "")
        parts.append(f"{len(left)} unscheduled ({shown})")
    return "kernels: " + ", ".join(parts)


def compile_to_artifact(imported: ImportedModel, opts: BuildOptions, out_dir: Path, force: bool,
                        model_info: dict, verify=None) -> artifact.Manifest:
    """Write the artifact directory. ``verify(staged_dir)`` runs before it is moved into place:
    if it raises, nothing is left at ``out_dir``."""
    import tvm

    outputs = output_specs(imported.mod, imported.output_names)
    exporter.linker(opts.platform, opts.objects_only)  # a missing toolchain fails now, not after the build
    tspec = target_dict(opts.platform, opts.device, opts.gpu_family)
    with artifact.staging(out_dir, force) as tmp:
        with step(f"Compiling for {opts.platform.name}/{opts.device} with TVM {tvm.__version__}"):
            report: dict = {}
            ex = build_executable(imported, opts, report)
        if report:
            console.print(f"  {schedule_summary(report)}")
            if opts.tuning_db and not report.get("tuned"):
                console.print(f"  [yellow]![/] {opts.tuning_db} has no tuned kernel of this model for this target "
                              "(tuned for another model or input shape, or by an older tvmgen): run `tvmgen tune` "
                              "on this model to use one")
        what = "an object archive" if opts.objects_only or opts.platform.exporter == "xcode" else "the library"
        with step(f"Exporting {what} ({opts.platform.exporter} toolchain)"):
            exported = exporter.export(ex, opts.platform, tmp, opts.objects_only)
        params = None
        if opts.separate_params:
            names = [f"p{i}" for i in range(len(imported.params))]
            blob = tvm.runtime.save_param_dict(dict(zip(names, imported.params)))
            (tmp / "model.params").write_bytes(blob)
            params = {"file": "model.params", "names": names, "count": len(names)}
        devices = [{"name": opts.device, "dl_device_type": DL_DEVICE_TYPES[opts.device], "id": 0, "alloc_type": 2}]
        if DL_DEVICE_TYPES[opts.device] != DL_DEVICE_TYPES["cpu"]:  # the VM keeps shapes and scalars on the host
            devices.append({"name": "cpu", "dl_device_type": DL_DEVICE_TYPES["cpu"], "id": 0, "alloc_type": 2})
        manifest = artifact.Manifest(
            model=model_info,
            platform=opts.platform.name,
            abi=opts.platform.abi,
            arch=opts.platform.arch,
            device=opts.device,
            target=tspec,
            export={"kind": exported.kind, "library": exported.library,
                    "system_lib": opts.platform.system_lib, "finish_command": exported.finish_command},
            inputs=imported.inputs,
            outputs=outputs,
            params=params,
            vm={"entry": "main", "devices": devices, "num_inputs": len(imported.inputs),
                # bytes each input's data must be aligned to (absent: TVM's 64)
                **({"input_alignment": report["input_alignment"]} if "input_alignment" in report else {})},
            versions={"tvm": tvm.__version__, "tvmgen": __version__},
            created=artifact.now(),
            runtime_needs=opts.runtime_needs or {},
        )
        artifact.write_manifest(tmp, manifest)
        if verify is not None:
            verify(tmp)
    log.info("artifact written to %s", out_dir)
    return manifest
