"""Weight-stationary kernels prefetch the next task's block of weights.

A weight-stationary convolution (``schedule_rules._weight_stationary``: a late stage's 1x1
convolution, 7 x 7 pixels, 192 -> 1152 channels, 884 KB of weights) runs one task per block of
output channels; a task reads its block of weights (192 x 32 floats, 24 KB) from memory during
its first row of tiles, then from L1 for the other rows. That first row waits on memory: the
tile does 14 multiply-adds per 128 bytes of weights, faster than one core streams them. The next
block's weights are known, so the rows after the first prefetch them into L2 (``prefetcht1`` on
x86, ``prfm pldl2keep`` on ARM), a share per row, while the tile computes from L1: the next
task's first row then reads from L2.

Measured on the 2-core AVX-512 Xeon, fresh builds with and without, interleaved, medians of 5 x 300
runs: MnasNet 6.28 -> 5.97 ms at one thread (its 1152 -> 320 convolution 318 -> 275 us, 320 -> 1280
365 -> 318 us), 3.37 -> 3.26 ms at two; EfficientNet-B0 10.38 -> 9.92 ms and 5.61 -> 5.47 ms;
MobileNetV2 and ResNet-18 unchanged within the noise.

The schedule marks the task's row loop (``ANNOTATION``); ``PrefetchNextWeights`` runs after the
weights are packed (``schedules.fold_packed_weights_passes``), when the packed weights are a
parameter whose first axis is the task, and adds the prefetches there. A kernel whose weights were
not packed (weights passed at run time) gets none. A prefetch is a hint: it cannot fault or change
a result, and its address is kept inside the buffer all the same.
"""

from __future__ import annotations

import numpy as np

ANNOTATION = "tvmgen.prefetch_next_weights"
_LINE_BYTES = 64  # a cache line on the x86 and ARM cores tvmgen targets
_TO_L2 = 2  # llvm.prefetch locality 2: prefetcht1 / prfm pldl2keep


def PrefetchNextWeights():  # noqa: N802 - a pass, named like TVM's
    import tvm
    from tvm import tirx

    @tvm.transform.module_pass(opt_level=0, name="TvmgenPrefetchNextWeights")
    def _pass(mod, _ctx):
        for gv, f in list(mod.functions.items()):
            if isinstance(f, tirx.PrimFunc):
                new = _with_prefetches(f)
                if not new.same_as(f):
                    mod[gv] = new
        return mod

    return _pass


def _with_prefetches(func):
    """``func`` with, in each marked row loop inside a parallel task loop, the prefetches of the
    next task's weights: rows 1 .. n-1 each prefetch 1 / (n - 1) of the block's cache lines."""
    import tvm_ffi
    from tvm import tirx

    weights = [p for p in func.params if len(getattr(getattr(p, "ty", None), "shape", ())) >= 2]

    def in_task(task):
        tasks = int(task.extent)
        blocks = [w for w in weights if isinstance(w.ty.shape[0], tirx.IntImm) and int(w.ty.shape[0]) == tasks]

        def prefetch_in(rows):
            if ANNOTATION not in rows.annotations or int(rows.extent) < 2 or not blocks:
                return rows
            w = max(blocks, key=lambda b: int(np.prod([int(d) for d in b.ty.shape])))  # not the bias
            dims = [int(d) for d in w.ty.shape[1:]]
            per_block = int(np.prod(dims))
            per_line = _LINE_BYTES * 8 // tvm_ffi.dtype(str(w.ty.dtype)).bits
            per_row = _ceil_div(_ceil_div(per_block, per_line), int(rows.extent) - 1)  # lines each row prefetches
            t, r = task.loop_var, rows.loop_var
            dtype = r.ty.dtype
            line = tirx.Var("line", dtype)
            offset = tirx.min(((r - 1) * per_row + line) * per_line, per_block - 1)
            index = [t + 1]
            for k in range(len(dims)):  # the offset in the block, as indices
                stride = int(np.prod(dims[k + 1 :]))
                index.append(offset // stride % dims[k] if k else offset // stride)
            address = tirx.address_of(tirx.BufferLoad(w, index))
            hint = tirx.Evaluate(tirx.call_intrin("void", "tirx.prefetch", address, 0, _TO_L2, 1))
            loop = tirx.For(line, tirx.const(0, dtype), tirx.const(per_row, dtype), tirx.ForKind.SERIAL, hint)
            first = tirx.IfThenElse(tirx.all(r >= 1, t + 1 < tasks), loop, None)
            return tirx.For(
                r,
                rows.min,
                rows.extent,
                rows.kind,
                tirx.SeqStmt([first, rows.body]),
                rows.thread_binding,
                rows.annotations,
            )

        return prefetch_in

    def task_loop(loop):
        if loop.kind != tirx.ForKind.PARALLEL:
            return loop
        body = tvm_ffi.structural_map(loop.body, [(tirx.For, in_task(loop))])
        if body.same_as(loop.body):
            return loop
        return tirx.For(loop.loop_var, loop.min, loop.extent, loop.kind, body, loop.thread_binding, loop.annotations)

    return tvm_ffi.structural_map(func, [(tirx.For, task_loop)])


def _ceil_div(a: int, b: int) -> int:
    return -(-a // b)
