"""The GEMM `tvmgen bench --gemm N` times: one n x n x n float32 matmul, scheduled for the device by
hand (tiled and vectorised on a CPU, thread-bound tiles on a GPU) and built with TVM's own code
generators, to measure a device's arithmetic speed apart from any model."""

from __future__ import annotations

from pathlib import Path

from tvmgen.compiler.targets import export
from tvmgen.compiler.targets.platforms import BuildTarget


def gemm_module(n: int, target: BuildTarget):
    """The matmul, built for ``target`` (a runtime module, not yet exported)."""
    import tvm
    from tvm import s_tir, te

    a = te.placeholder((n, n), name="A")
    b = te.placeholder((n, n), name="B")
    k = te.reduce_axis((0, n), name="k")
    c = te.compute((n, n), lambda i, j: te.sum(a[i, k] * b[k, j], axis=k), name="C")
    sch = s_tir.Schedule(te.create_prim_func([a, b, c]).with_attr("global_symbol", "gemm"))
    block = sch.get_sblock("C")
    i, j, kk = sch.get_loops(block)
    if not target.kind.gpu:
        i0, i1 = sch.split(i, [None, 8 if n % 8 == 0 else 1])
        j0, j1 = sch.split(j, [None, 32 if n % 32 == 0 else 1])
        k0, k1 = sch.split(kk, [None, 4 if n % 4 == 0 else 1])
        sch.reorder(i0, j0, k0, k1, i1, j1)
        sch.vectorize(j1)
        sch.parallel(i0)
        sch.decompose_reduction(block, k0)
    else:
        tile = 16 if n % 16 == 0 else 1
        i0, i1 = sch.split(i, [None, tile])
        j0, j1 = sch.split(j, [None, tile])
        sch.reorder(i0, j0, i1, j1, kk)
        sch.bind(i0, "blockIdx.y")
        sch.bind(j0, "blockIdx.x")
        sch.bind(i1, "threadIdx.y")
        sch.bind(j1, "threadIdx.x")
    return tvm.compile(sch.mod, target.tvm)


def build_gemm(n: int, target: BuildTarget, path: Path) -> Path:
    """The matmul as a shared library for ``target``'s platform at ``path`` (linked with its toolchain)."""
    import tvm.support.cc as cc

    compiler = export.linker(target.platform, objects_only=False)  # a missing toolchain fails before the build
    gemm_module(n, target).export_library(str(path), fcompile=cc.cross_compiler(str(compiler)))
    return path
