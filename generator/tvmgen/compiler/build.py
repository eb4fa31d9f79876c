"""Model file -> artifact directory: import, build with TVM, export, write the manifest."""

from __future__ import annotations

import contextlib
import functools
import logging
import os
from dataclasses import dataclass
from pathlib import Path

from tvmgen import __version__
from tvmgen.compiler import gpu, kernels, recurrent, rewrites
from tvmgen.compiler.cpu import stack_tiles
from tvmgen.compiler.gpu import adreno, opencl_loops
from tvmgen.compiler.int8 import int8_qdq
from tvmgen.compiler.targets import export as exporter
from tvmgen.compiler.targets.platforms import DL_DEVICE_TYPES, BuildTarget, Platform
from tvmgen.core import artifact, fold_builds, interrupts
from tvmgen.core.errors import CompileError, TvmgenError
from tvmgen.core.log import console, filtered_stderr, step
from tvmgen.core.model import ImportedModel, output_specs

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
    precision: str = "fp32"  # "fp16": float16 weights and activations (compiler/precision.py)

    @classmethod
    def for_target(cls, target: BuildTarget, **options) -> BuildOptions:
        """Options for a target resolved once from the command line (its TVM target is reused)."""
        opts = cls(target.platform, target.device, target.gpu_family, **options)
        opts.__dict__["target"] = target
        return opts

    @functools.cached_property
    def target(self) -> BuildTarget:
        """The platform, device and GPU family checked together, with their TVM target."""
        return BuildTarget(self.platform, self.device, self.gpu_family)


@contextlib.contextmanager
def _logged_build(imported: ImportedModel, opts: BuildOptions):
    """With $TVMGEN_COMPILE_LOG=FILE, append one JSON line per build: what was built (the module's
    structural hash, target, options), for how long, and for which test: where a test run's compile
    time goes, and which builds repeat."""
    out = os.environ.get("TVMGEN_COMPILE_LOG")
    if not out:
        yield
        return
    import json
    import time

    import tvm_ffi

    row: dict = {
        "module": f"{tvm_ffi.structural_hash(imported.mod) & (2**64 - 1):x}",
        "target": f"{opts.platform.name}/{opts.device}/{opts.gpu_family}",
        "options": {
            k: str(getattr(opts, k)) for k in ("separate_params", "objects_only", "tuning_db", "schedules", "precision")
        },
        "test": os.environ.get("PYTEST_CURRENT_TEST", ""),
    }
    t0 = time.time()
    yield
    row["seconds"] = round(time.time() - t0, 2)
    with open(out, "a") as f:
        f.write(json.dumps(row) + "\n")


def build_executable(imported: ImportedModel, opts: BuildOptions, report: dict | None = None):
    """Build ``imported`` for ``opts`` (see _build_executable); logged with $TVMGEN_COMPILE_LOG."""
    with _logged_build(imported, opts):
        return _build_executable(imported, opts, report)


def _build_executable(imported: ImportedModel, opts: BuildOptions, report: dict | None = None):
    """Run TVM: bind or keep weights, lower with the target's pipeline, build. CPU builds fill
    ``report`` with the functions tuned, given tvmgen's default schedules, or left unscheduled.

    tvmgen's CPU pipeline never refuses a model TVM's own pipeline compiles: when it fails, the
    build is tried again without the layout conversion, then with TVM's own pipeline, and
    ``report["fallback"]`` says which pipeline built it and why the first failed."""
    from tvm import relax

    fold_builds.install()  # FoldConstant builds each distinct function once (core/fold_builds.py)
    target = opts.target.tvm
    mod = imported.mod
    if target.kind.name != "llvm":
        mod = _copy(mod)
    if not opts.separate_params and imported.params:
        weights = mod["main"].params[len(imported.inputs) :]
        mod = relax.transform.BindParams("main", dict(zip(weights, imported.params)))(mod)
    mod = rewrites.identifier_params(mod)  # kernel argument names in OpenCL C / CUDA / Metal source
    # fused LSTM/GRU layers: their kernels for this target (GPU: a work-group per sequence; Vulkan: the
    # operands staged, see recurrent.py)
    mod = recurrent.lower(mod, gpu=target.kind.name != "llvm", staged=target.kind.name == "vulkan")
    if opts.precision != "fp32":
        from tvmgen.compiler import precision

        mod = precision.apply(mod, opts.precision)  # interface stays float32
    if target.kind.name == "vulkan":  # TVM's wheel has no Vulkan code generator: tvmgen's own
        from tvmgen.compiler import vulkan

        vulkan.register()
    report = {} if report is None else report
    failures: list[tuple[str, Exception]] = []
    for name, make_pipeline in _pipelines(target, opts, report):
        report.clear()
        try:
            with target:
                pipeline = kernels.capture(make_pipeline(), report)  # report["module"]: for kernels.json
            tir_pipeline = (
                adreno.register_tir_pipeline() if "texture" in target.keys else stack_tiles.tir_pipeline(target)
            )
            loops = target.kind.name == "opencl" and opencl_loops.enabled()
            if loops:  # unrolled loops kept as loops under #pragma unroll: the driver compiles less
                tir_pipeline = opencl_loops.tir_pipeline(tir_pipeline)
            with (
                adreno.vector_math() if "texture" in target.keys else contextlib.nullcontext(),
                opencl_loops.build_context() if loops else contextlib.nullcontext(),
            ):
                ex = relax.build(
                    _copy(mod) if target.kind.name != "llvm" else mod,
                    target,
                    relax_pipeline=pipeline,
                    tir_pipeline=tir_pipeline,
                    system_lib=True if opts.platform.system_lib else None,
                )
        except TvmgenError:  # tvmgen's own (e.g. a tuning database without this target): already says what to do
            raise
        except Exception as e:
            interrupts.reraise_if_interrupted(e)  # Ctrl-C inside TVM comes back as an error: no fallback
            log.info("the build with %s failed", name, exc_info=True)
            failures.append((name, e))
            continue
        if failures:
            first, error = failures[0]
            report["fallback"] = {
                "pipeline": name,
                "failed": first,
                "cause": tvm_error_summary(error, getattr(imported, "nodes", ())),
                "cost": fallback_cost(name, report),
            }
            log.info("%s failed (%s); built with %s", first, report["fallback"]["cause"], name)
        return ex
    name, error = failures[-1]
    raise CompileError(
        f"TVM failed to build for {opts.platform.name}/{opts.device}: "
        f"{tvm_error_summary(error, getattr(imported, 'nodes', ()))}",
        "the log file (-vv prints it too) has TVM's full message; if TVM cannot lower an operator, "
        "`tvmgen compile --help` lists the ways round it (--const, custom operators); "
        "try --device cpu to isolate a GPU scheduling problem",
    ) from error


def fallback_cost(pipeline: str, report: dict) -> str:
    """What a fallback build gives up, by kernel, from the module it built: the convolutions left in
    the model's layout (no NHWC: their tiles cannot vectorise the output channels), or every kernel
    left unscheduled (TVM's own pipeline: one thread, no vectors); the numbers are docs/cpu.md's."""
    table = kernels.describe(report["module"]) if report.get("module") is not None else {"kernels": []}
    work = sum(k["flops"] * max(k["calls"], 1) for k in table["kernels"]) or 1.0

    def named(ks: list) -> str:
        names = ", ".join(k["name"] for k in ks[:3]) + (f", +{len(ks) - 3} more" if len(ks) > 3 else "")
        share = sum(k["flops"] * max(k["calls"], 1) for k in ks) / work
        return f"{len(ks)} kernel{'s' if len(ks) != 1 else ''} ({names}; {share:.0%} of the model's FLOPs)"

    if "without the NHWC" in pipeline:
        convs = [k for k in table["kernels"] if k["kind"] in ("conv2d", "depthwise")]
        if not convs:
            return "no convolution lost its NHWC layout"
        return (
            f"{named(convs)} left in the model's NCHW layout, without tvmgen's NHWC convolution "
            "schedules (several times slower: a 1-D convolution's ran at 4.4 GFLOP/s instead of 193)"
        )
    if "unscheduled" in pipeline:
        return f"{named(table['kernels'])} left unscheduled by tvmgen: one thread, no vectors (the built-in model ran 26x slower so)"
    return ""


def _copy(mod):
    """A deep copy of ``mod`` for a GPU build: some of TVM's GPU passes change shared nodes in place
    (seen: after an fp16 Adreno build, the next build of the same imported model, `--check`'s host
    build, failed with "Mismatched lv2.device_type"; after a failed Adreno texture build, the buffer
    build of the same module failed with "key is not in Map"), so each attempt gets its own. 0.05 s
    for the built-in model."""
    import tvm

    return tvm.ir.load_json(tvm.ir.save_json(mod))


# The model operators each Relax operator comes from, where the names differ beyond case and "_".
MODEL_OPERATORS = {
    "conv2d": ("Conv", "CONV_2D", "DEPTHWISE_CONV_2D"),
    "conv2d_transpose": ("ConvTranspose", "TRANSPOSE_CONV", "Convolution2DTransposeBias"),
    "matmul": ("MatMul", "Gemm", "FULLY_CONNECTED", "BATCH_MATMUL"),
    "max_pool2d": ("MaxPool", "MAX_POOL_2D"),
    "avg_pool2d": ("AveragePool", "AVERAGE_POOL_2D"),
    "resize2d": ("Resize", "RESIZE_BILINEAR", "RESIZE_NEAREST_NEIGHBOR"),
    "prelu": ("PRelu", "PRELU"),
}


def tvm_error_summary(error: Exception, nodes=()) -> str:
    """The first meaningful line of a TVM error, and the Relax operator it names with the model
    nodes that operator comes from: never TVM's "# Metadata omitted" trailer."""
    import re

    lines = [ln.strip() for ln in str(error).splitlines()]
    noise = ("# Metadata omitted", "Traceback", 'File "', "Offending call", "^")
    meaningful = [ln for ln in lines if ln and not ln.startswith(noise)]
    first = next((ln for ln in meaningful if not ln.startswith("R.")), meaningful[0] if meaningful else "")
    text = f"{type(error).__name__}: {first}" if first else type(error).__name__
    op = re.search(r"R\.((?:[a-z0-9_]+\.)*([a-z0-9_]+))\(", str(error))
    if op:
        text += f" (operator R.{op.group(1)}"
        short = op.group(2)
        kinds = {k.lower().replace("_", "") for k in MODEL_OPERATORS.get(short, ())} | {short.replace("_", "")}
        names = [name for kind, name in nodes if kind.lower().replace("_", "") in kinds]
        if names:
            shown = ", ".join(repr(n) for n in names[:3]) + (f" and {len(names) - 3} more" if len(names) > 3 else "")
            text += f", from the model's {nodes[[n for _, n in nodes].index(names[0])][0]} node {shown}"
        text += ")"
    return text


def _pipelines(target, opts: BuildOptions, report: dict) -> list:
    """(name, () -> pipeline) to try in order: CPU builds fall back one step at a time."""
    import tvm
    from tvm import relax

    from tvmgen.compiler import conv_transpose, cpu
    from tvmgen.compiler.gpu import kernel_names

    if target.kind.name == "metal":
        return [
            (
                "TVM's GPU pipeline without dlight's Matmul rule",
                lambda: tvm.transform.Sequential([metal_pipeline(target, report), kernel_names.short_kernel_names()]),
            )
        ]
    if target.kind.name == "llvm" and opts.schedules:
        return [
            ("tvmgen's CPU pipeline", lambda: cpu.pipeline(target, opts.tuning_db, report)),
            (
                "tvmgen's CPU pipeline without the NHWC layout conversion",
                lambda: cpu.pipeline(target, opts.tuning_db, report, layout=False),
            ),
            ("TVM's own pipeline (kernels unscheduled: slow)", lambda: relax.get_default_pipeline(target)),
        ]
    if "texture" in target.keys:  # --gpu-family adreno: texture memory, else Adreno schedules on buffers

        def _with_tvmgen_passes(pipeline):  # transposed convolutions lowered first, kernel names shortened after
            return tvm.transform.Sequential(
                [conv_transpose.lower_only_pass(), pipeline, kernel_names.short_kernel_names()]
            )

        return [
            (
                "TVM's Adreno pipeline with texture memory",
                lambda: _with_tvmgen_passes(adreno.pipeline(target, True, report)),
            ),
            (
                "TVM's Adreno pipeline with buffer memory",
                lambda: _with_tvmgen_passes(adreno.pipeline(target, False, report)),
            ),
            # tvmgen's GPU pipeline, as --gpu-family generic builds it (its fixes of TVM's GPU lowering
            # included: TVM's own generic pipeline computed seg_head's transposed convolutions wrong)
            ("tvmgen's generic GPU pipeline", lambda: gpu.pipeline(target, opts.tuning_db, report)),
        ]
    # GPU targets: TVM's own pipeline (compiler.gpu: a `tvmgen tune` database first where it applies,
    # then dlight), after tvmgen's lowering of transposed convolutions (TVM's is NCHW-only) and with
    # kernel names short enough for every driver; then without tvmgen's lowering
    return [
        (
            "TVM's own pipeline, transposed convolutions lowered by tvmgen",
            lambda: gpu.pipeline(target, opts.tuning_db, report),
        ),
        ("TVM's own pipeline", lambda: gpu.pipeline(target, opts.tuning_db, report, lower_conv_transpose=False)),
    ]


def metal_pipeline(target, report: dict | None = None):
    """TVM's generic GPU pipeline without dlight's Matmul rule.

    In TVM 0.27 that rule segfaults the compiler on Metal targets (seen on any model with a
    dense/conv layer); the remaining rules (GEMV, reductions, fallback) schedule everything.
    """
    from tvm.relax.backend.gpu_generic import pipeline as generic
    from tvm.s_tir import dlight as dl

    rules = [dl.gpu.GEMV(), dl.gpu.Reduction(), dl.gpu.GeneralReduction(), dl.gpu.Fallback()]
    return gpu.backend_pipeline(
        generic, target, rules, report, first=[int8_qdq.ShareDequantized()], name="TvmgenMetalPipeline"
    )


def schedule_summary(report: dict) -> str:
    """One line: where the CPU kernels' schedules came from."""
    parts = []
    if report.get("tuned"):
        parts.append(f"{len(report['tuned'])} from the tuning database")
    parts.append(f"{len(report.get('scheduled', []))} {report.get('defaults', 'tvmgen defaults')}")
    if report.get("handwritten"):
        parts.append(f"{len(report['handwritten'])} tvmgen kernels ({', '.join(report['handwritten'][:4])})")
    left = report.get("left", [])
    if left:
        shown = ", ".join(left[:4]) + (f", +{len(left) - 4} more" if len(left) > 4 else "")
        parts.append(f"{len(left)} unscheduled ({shown})")
    return "kernels: " + ", ".join(parts)


def compile_to_artifact(
    imported: ImportedModel, opts: BuildOptions, out_dir: Path, force: bool, model_info: dict, verify=None
) -> artifact.Manifest:
    """Write the artifact directory. ``verify(staged_dir)`` runs before it is moved into place:
    if it raises, nothing is left at ``out_dir``."""
    import tvm

    from tvmgen.frontends.base import weights_as_params

    if opts.separate_params:
        imported = weights_as_params(imported)
    outputs = output_specs(imported.mod, imported.output_names)
    exporter.linker(opts.platform, opts.objects_only)  # a missing toolchain fails now, not after the build
    tspec = opts.target.spec
    with artifact.staging(out_dir, force) as tmp:
        with step(f"Compiling for {opts.platform.name}/{opts.device} with TVM {tvm.__version__}"):
            report: dict = {}
            ex = build_executable(imported, opts, report)
        if report.get("fallback"):
            fb = report["fallback"]
            console.print(
                f"  [yellow]![/] {fb['failed']} failed: {fb['cause']}\n"
                f"    built with {fb['pipeline']} instead; please report this with the log file"
                + (f"\n    cost: {fb['cost']}" if fb.get("cost") else "")
            )
        if report.get("float64_demoted"):
            console.print(
                f"  [yellow]![/] {report['float64_demoted']} float64 constant(s) and cast(s) inside the model computed "
                "in float32 on the GPU (GPUs lack float64: OpenCL's cl_khr_fp64, Vulkan's shaderFloat64)"
            )
        for line in gpu.rule_failures_summary(report.get("rule_failures", [])):
            console.print(f"  [yellow]![/] {line}")
        work_groups = (
            gpu.work_groups_record(report["work_groups"], opts.target.tvm) if report.get("work_groups") else None
        )
        if work_groups:
            console.print(f"  {gpu.work_groups_summary(work_groups)}")
        if report.get("scheduled") is not None or report.get("tuned"):
            console.print(f"  {schedule_summary(report)}")
            if opts.tuning_db and not report.get("tuned"):
                console.print(
                    f"  [yellow]![/] {opts.tuning_db} has no tuned kernel of this model for this target "
                    "(tuned for another model or input shape, or by an older tvmgen): run `tvmgen tune` "
                    "on this model to use one"
                )
        final = report.pop("module", None)
        kernels.record(tmp, final, imported.params, model_info.get("source"), work_groups)
        what = "an object archive" if opts.objects_only or opts.platform.exporter == "xcode" else "the library"
        with step(f"Exporting {what} ({opts.platform.exporter} toolchain)"):
            with filtered_stderr():  # TVM's per-constant "Scope Saving" lines of texture builds
                exported = exporter.export(ex, opts.platform, tmp, opts.objects_only)
        params = None
        if opts.separate_params:
            names = [f"p{i}" for i in range(len(imported.params))]
            blob = tvm.runtime.save_param_dict(dict(zip(names, imported.params)))
            (tmp / "model.params").write_bytes(blob)
            params = {"file": "model.params", "names": names, "count": len(names)}
        # One entry per virtual device of the module (texture builds have one per memory scope, all
        # the same GPU), then the host: the VM indexes them in that order.
        vdevices = max(1, len(final.global_infos.get("vdevice", ())) if final is not None else 1)
        devices = [
            {"name": opts.device, "dl_device_type": DL_DEVICE_TYPES[opts.device], "id": 0, "alloc_type": 2}
            for _ in range(vdevices if DL_DEVICE_TYPES[opts.device] != DL_DEVICE_TYPES["cpu"] else 1)
        ]
        if DL_DEVICE_TYPES[opts.device] != DL_DEVICE_TYPES["cpu"]:  # the VM keeps shapes and scalars on the host
            devices.append({"name": "cpu", "dl_device_type": DL_DEVICE_TYPES["cpu"], "id": 0, "alloc_type": 2})
        manifest = artifact.Manifest(
            model=model_info,
            platform=opts.platform.name,
            abi=opts.platform.abi,
            arch=opts.platform.arch,
            device=opts.device,
            target=tspec,
            export={
                "kind": exported.kind,
                "library": exported.library,
                "system_lib": opts.platform.system_lib,
                "finish_command": exported.finish_command,
            },
            inputs=imported.inputs,
            outputs=outputs,
            params=params,
            vm={
                "entry": "main",
                "devices": devices,
                "num_inputs": len(imported.inputs),
                # bytes each input's data must be aligned to (absent: TVM's 64)
                **({"input_alignment": report["input_alignment"]} if "input_alignment" in report else {}),
            },
            versions={"tvm": tvm.__version__, "tvmgen": __version__},
            created=artifact.now(),
            runtime_needs=opts.runtime_needs or {},
            precision=opts.precision,
        )
        artifact.write_manifest(tmp, manifest)
        if verify is not None:
            verify(tmp)
    log.info("artifact written to %s", out_dir)
    return manifest
