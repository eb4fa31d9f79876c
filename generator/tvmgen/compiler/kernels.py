"""What a compiled model is made of, recorded at compile time in the artifact's ``kernels.json``.

The library holds only machine code, so what the profiler and ``tvmgen inspect`` need to know
about its kernels is taken from the Relax module that TVM turns into the library (the last step
of the pipeline, captured by :func:`capture`):

- each kernel (fused TIR function): the Relax operators it came from, its kind (conv2d,
  depthwise, matmul, recurrent, elementwise, copies/layout, other), FLOPs per call (TVM's
  ``estimate_tir_flops`` on the kernel's TIR) and calls per run;
- the constants (weights after folding) by the kernel that reads them;
- the VM's memory plan: every ``alloc_storage`` of ``main`` (the activations' workspace).
"""

from __future__ import annotations

import json
import logging
from pathlib import Path

import numpy as np

from tvmgen.core.kernel_table import FILE, kernel_kind, relax_ops

log = logging.getLogger("tvmgen.kernels")


def capture(pipeline, into: dict):
    """``pipeline`` wrapped so that the module it returns is kept in ``into["module"]``."""
    import tvm

    @tvm.transform.module_pass(opt_level=0, name="TvmgenCaptureFinal")
    def _capture(mod, ctx):
        mod = pipeline(mod)
        into["module"] = mod
        return mod

    return _capture


def describe(mod) -> dict:
    """The kernel table, constants and memory plan of a built Relax module (see the module doc)."""
    from tvm import ir, relax, tirx

    kernels = {}
    for gv, func in mod.functions.items():
        if isinstance(func, tirx.PrimFunc):
            name = gv.name_hint
            ops = relax_ops(name)
            flops = _flops(func) or _dot_flops(func)
            kernels[name] = {
                "name": name,
                "ops": ops,
                "kind": kernel_kind(ops, _block_names(func), flops),
                "flops": flops,
                "calls": 0,
            }
    constants, storages = [], []
    main = next((f for gv, f in mod.functions.items() if gv.name_hint == "main"), None)
    if isinstance(main, relax.Function):

        def visit(expr):
            if not isinstance(expr, relax.Call):
                return
            op = getattr(expr.op, "name", None)
            if op == "relax.vm.alloc_storage" and isinstance(expr.args[0], relax.ShapeExpr):
                size = 1
                for d in expr.args[0].values:
                    size *= int(d)
                storages.append(size)
            callee = getattr(expr.op, "name_hint", None)
            if callee in kernels:
                kernels[callee]["calls"] += 1
                for i, a in enumerate(expr.args):
                    if isinstance(a, ir.Constant) and isinstance(a.ty, relax.TensorType) and a.ty.shape is not None:
                        shape = [int(d) for d in a.ty.shape.values]
                        nbytes = int(np.prod(shape, dtype=np.int64)) * np.dtype(str(a.ty.dtype)).itemsize
                        constants.append(
                            {"kernel": callee, "arg": i, "shape": shape, "dtype": str(a.ty.dtype), "bytes": nbytes}
                        )

        relax.analysis.post_order_visit(main.body, visit)
    return {
        "kernels": sorted(kernels.values(), key=lambda k: -k["flops"] * max(k["calls"], 1)),
        "constants": constants,
        "memory_plan": {"storages": storages, "bytes": sum(storages)},
    }


def weights_summary(params, source: str | None = None) -> dict:
    """Bytes of the model's weights as imported, by dtype, and of the model file: TVM folds fp16
    weights to fp32 (the importer's casts, TFLite's DEQUANTIZE), so the library can be bigger."""
    by_dtype: dict[str, int] = {}
    for p in params or []:
        arr = p.numpy() if hasattr(p, "numpy") else p
        by_dtype[str(arr.dtype)] = by_dtype.get(str(arr.dtype), 0) + int(arr.nbytes)
    path = Path(source) if source and not source.startswith("builtin:") else None
    return {
        "bytes": sum(by_dtype.values()),
        "by_dtype": by_dtype,
        "model_file_bytes": path.stat().st_size if path and path.is_file() else None,
    }


def record(directory: Path, mod, params, source: str | None, work_groups: dict | None = None) -> None:
    """Write ``kernels.json`` for the module a build produced. The artifact is complete without it
    (profiles then name kernels without FLOPs): a module it cannot describe is logged, not fatal.
    ``work_groups`` (a GPU build's ``{"shared_bytes", "shared_kernel", "threads", "threads_kernel",
    "limits"}``, ``compiler.gpu.work_groups_record``) is kept as it is."""
    if mod is None:
        return
    try:
        table = describe(mod)
    except Exception:
        log.info("no kernels.json: the built module could not be described", exc_info=True)
        return
    table["source_weights"] = weights_summary(params, source)
    if work_groups:
        table["work_groups"] = work_groups
    (Path(directory) / FILE).write_text(json.dumps(table, indent=1) + "\n")


def _flops(func) -> float:
    import tvm
    from tvm.s_tir.analysis import estimate_tir_flops

    try:
        return float(estimate_tir_flops(tvm.IRModule({"main": func})))
    except Exception:
        return 0.0


def _dot_flops(func) -> float:
    """FLOPs of an 8-bit dot-product kernel (``compiler.int8``), which TVM cannot count once it is
    tensorized: 2 x rows x K x N from its packed weights [N / lanes, K / 4, lanes, 4] and its
    8-bit activations [..., K] (the first 8-bit parameter with K values in its last axis: a fused
    kernel may also read an 8-bit residual and write an 8-bit (quantised) result, as a full-integer
    model's 1x1 convolutions do); 0 for any other kernel."""
    params = [p.ty for p in func.params if hasattr(p.ty, "shape") and hasattr(p.ty, "dtype")]  # BufferType
    eight = [b for b in params if str(b.dtype) in ("int8", "uint8")]
    packed = [b for b in eight if len(b.shape) == 4 and int(b.shape[-1]) == 4]
    if len(packed) != 1:
        return 0.0
    w = [int(d) for d in packed[0].shape]
    k, n = w[1] * 4, w[0] * w[2]
    acts = [[int(d) for d in b.shape] for b in eight if b is not packed[0] and len(b.shape) >= 1]
    a = next((s for s in acts if s[-1] == k), None)
    if a is None:
        return 0.0
    return 2.0 * float(np.prod(a[:-1])) * k * n


def _block_names(func) -> list[str]:
    from tvm import s_tir

    try:
        sch = s_tir.Schedule(func)
    except Exception:
        return []
    names = []

    def walk(block):
        for child in sch.get_child_blocks(block):
            names.append(sch.get(child).name_hint)
            walk(child)

    try:
        walk(sch.get_sblock("root"))
    except Exception:
        return names
    return names
