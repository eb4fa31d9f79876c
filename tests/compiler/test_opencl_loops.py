"""compiler.opencl_loops: OpenCL kernels whose unrolled loops stay loops under #pragma unroll (the
driver unrolls them; NVIDIA compiled the int8 MobileNetV2's kernels in 3.7 s instead of 5.0-5.6 s,
docs/benchmarks.md). Their outputs on PoCL: tests/compiler/test_gpu_family.py and the other OpenCL tests, which
build this way by default."""

from __future__ import annotations

import re

from tvmgen.compiler.gpu import opencl_loops
from tvmgen.compiler.targets.platforms import PLATFORMS, make_target, target_dict


def test_the_pragma_goes_before_the_marked_loops_only():
    src = (
        "__kernel void k(__global float* x) {\n"
        "  for (int i = 0; i < 9; ++i) {\n"
        "    for (int ax1_3_unrl = 0; ax1_3_unrl < 4; ++ax1_3_unrl) {\n"
        "      for (int ax2_unrl_1 = 0; ax2_unrl_1 < 4; ++ax2_unrl_1) { x[i] += 1.0f; }\n"
        "    }\n"
        "  }\n"
        "}\n"
    )
    out = opencl_loops.postproc(src).splitlines()
    assert out[2] == "    #pragma unroll" and out[3].startswith("    for (int ax1_3_unrl")
    assert out[4] == "      #pragma unroll" and out[5].startswith("      for (int ax2_unrl_1")
    assert out[1].startswith("  for (int i = 0") and sum("#pragma" in ln for ln in out) == 2
    assert opencl_loops.postproc("__kernel void k() {}\n") == "__kernel void k() {}\n"


def test_a_matmul_keeps_its_unrolled_loops_as_loops(monkeypatch):
    """dlight's matmul kernel, built the way TVM does (its inner loops spelled out) and the tvmgen way:
    the same kernel, each unrolled loop one loop under #pragma unroll, several times less source."""
    import tvm
    from tvm import te
    from tvm.s_tir import dlight as dl

    a = te.placeholder((128, 256), "float32", "a")
    b = te.placeholder((256, 96), "float32", "b")
    k = te.reduce_axis((0, 256), "k")
    c = te.compute((128, 96), lambda i, j: te.sum(a[i, k] * b[k, j], axis=k), name="c")
    target = make_target(target_dict(PLATFORMS["host"], "opencl", "generic"))
    with target:
        sch = dl.gpu.Matmul().apply(te.create_prim_func([a, b, c]), target, False)
    mod = tvm.IRModule({"main": sch.mod["main"].with_attr("global_symbol", "mm")})
    text = tvm.tirx.build(mod, target=target).imports[0].inspect_source()
    with opencl_loops.build_context():
        loops = tvm.tirx.build(mod, target=target, pipeline=opencl_loops.tir_pipeline("default"))
    loops = loops.imports[0].inspect_source()

    def kernels(src):
        return sorted(set(re.findall(r"^__kernel void (\w+)\(", src, re.M)))

    assert kernels(loops) == kernels(text) == ["mm_kernel"]
    assert "#pragma unroll" not in text and "_unrl" not in text
    lines = loops.splitlines()
    pragmas = [i for i, ln in enumerate(lines) if ln.strip() == "#pragma unroll"]
    assert len(pragmas) >= 3, loops[:2000]  # the tile's init, loads, multiply-adds, stores
    assert all(re.match(r"\s*for \(int \w+_unrl\w* = 0; ", lines[i + 1]) for i in pragmas), loops[:2000]
    # every loop under the pragma has a constant trip count, as TVM's unroll required
    assert all(re.search(r"< \d+; \+\+", lines[i + 1]) for i in pragmas)
    assert len(loops) * 3 < len(text), (len(loops), len(text))
    # TVMGEN_OPENCL_UNROLL=text: TVM's own text
    monkeypatch.setenv("TVMGEN_OPENCL_UNROLL", "text")
    assert not opencl_loops.enabled()
    monkeypatch.delenv("TVMGEN_OPENCL_UNROLL")
    assert opencl_loops.enabled()
