"""Small buffers of a kernel (register tiles, a depthwise window row's padded input) on the stack.

TVM 0.27 lowers every buffer allocation on the CPU to a ``TVMBackendAllocWorkspace`` call, except a
"global" one under 1 KB (``LowerTVMBuiltin``). A register tile is a "local" buffer (the schedule's
``cache_write``), so each parallel task of each kernel called the workspace allocator for its tile,
and, the tile being memory behind a pointer returned by a call, LLVM could not keep it in
registers: the tile was zeroed in memory before the reduction, stored after it and loaded again
for the bias and activation (a depthwise tile: 16 stores of zeros, 8 stores and 8 loads per 72
multiply-adds). On the stack (``alloca``), LLVM's scalar replacement keeps it in registers.

This module's TIR pipeline is TVM's default one for CPUs (``s_tir``) with one pass added before the
host finalisation (``LowerTVMBuiltin``): allocations of a constant size up to ``STACK_BYTES`` are
marked ``disable_lower_builtin``, which ``LowerTVMBuiltin`` leaves as stack allocations (LLVM puts
them at the function's entry, once per call, not per loop iteration). Larger ones (a band of padded
input rows, a chunked reduction's accumulators, a whole intermediate tensor) keep the workspace.
4 KB holds the largest tile (14 rows x 4 vectors of 16 floats: 3.5 KB) and stays far below the
smallest thread stack tvmgen's kernels run on (512 KB, an iOS secondary thread).

Fresh builds with and without, interleaved, medians of 5 x 300 runs (AVX-512), 1 / 2
threads: MnasNet 4.77 -> 4.38 / 2.93 -> 2.68 ms, MobileNetV2 4.47 -> 4.11 / 2.77 -> 2.46,
EfficientNet-B0 8.10 -> 7.76 / 4.63 -> 4.49, ShuffleNet 2.48 -> 2.35 / 1.96 -> 1.81,
MobileNetV3-Small 1.31 -> 1.22 / 1.04 -> 0.96, SqueezeNet 3.83 -> 3.73 ms, ResNet-18 21.4 -> 21.3 ms.
"""

from __future__ import annotations

import numpy as np

TIR_PIPELINE = "tvmgen-cpu"
STACK_BYTES = 4096


def tir_pipeline(target) -> str:
    """The TIR pipeline to build for ``target`` with (``relax.build`` / ``tvm.compile``'s
    ``tir_pipeline``): this module's for CPUs, TVM's default for the rest."""
    return register_tir_pipeline() if target.kind.name == "llvm" else "default"


def register_tir_pipeline() -> str:
    """The pipeline's name for ``relax.build(tir_pipeline=...)``, registered on first use."""
    import tvm
    from tvm.tirx import compilation_pipeline as tir

    if TIR_PIPELINE not in tir.PIPELINE_MAP:

        def factory():
            lowering, host, device = tir.get_tir_pipeline("s_tir")
            return lowering, lambda: tvm.transform.Sequential([SmallBuffersOnTheStack(), host()]), device

        tir.register_tir_pipeline(TIR_PIPELINE, factory)
    return TIR_PIPELINE


def SmallBuffersOnTheStack():  # noqa: N802 - a pass, named like TVM's
    """Mark each allocation of a constant size up to ``STACK_BYTES`` for the stack."""
    import tvm_ffi
    from tvm import tirx

    def on_alloc(stmt):
        buf = stmt.buffer
        if "disable_lower_builtin" in stmt.annotations or not all(isinstance(d, tirx.IntImm) for d in buf.shape):
            return stmt
        dtype = tvm_ffi.dtype(str(buf.dtype))
        if int(np.prod([int(d) for d in buf.shape])) * dtype.bits * dtype.lanes // 8 > STACK_BYTES:
            return stmt
        return tirx.AllocBuffer(buf, {**stmt.annotations, "disable_lower_builtin": tirx.IntImm("int32", 1)}, stmt.span)

    @tirx.transform.prim_func_pass(opt_level=0, name="TvmgenSmallBuffersOnTheStack")
    def _pass(func, _mod, _ctx):
        return tvm_ffi.structural_map(func, [(tirx.AllocBuffer, on_alloc)])

    return _pass
