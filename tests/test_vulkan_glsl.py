"""tvmgen's GLSL printer (``compiler.glsl``) on hand-written kernels: 128-bit vector accesses and eager
boolean operands, the shaders compiled by glslang (optimized, ``-Os``) and validated by spirv-val."""

from __future__ import annotations

import shutil
import subprocess

import pytest


def _kernel():
    import tvm
    from tvm.script import tirx as T

    from tvmgen.compiler import glsl

    @T.prim_func
    def k(
        A: T.handle("float32", "global"),
        B: T.handle("float32", "global"),
        C: T.handle("float32", "global"),
        D: T.handle("float32", "global"),
    ):
        T.func_attr(
            {"tirx.noalias": True, "calling_conv": 2, "tirx.kernel_launch_params": ["blockIdx.x", "threadIdx.x"]}
        )
        a = T.decl_buffer((1024,), "float32", data=A)
        b = T.decl_buffer((1024,), "float32", data=B)
        c = T.decl_buffer((1024,), "float32", data=C)
        d = T.decl_buffer((1024,), "float32", data=D)
        bx = T.launch_thread("blockIdx.x", 4)
        tx = T.launch_thread("threadIdx.x", 64)
        # aligned (a multiple of 4, also through the modular analysis) and unaligned ramps
        c[T.Ramp((bx * 64 + tx) * 4, 1, 4)] = (
            a[T.Ramp((bx * 64 + tx) * 4, 1, 4)] * b[T.Ramp(bx * 256 + tx * 4, 1, 4)] + b[T.Ramp(tx * 4 + 1, 1, 4)]
        )
        # d is stored as a vector and read element by element: it stays scalar (no aliasing views)
        d[T.Ramp(tx * 4, 1, 4)] = a[T.Ramp(tx * 4, 1, 4)]
        if tx < 10 and bx > 0:
            d[tx] = d[tx + 1] + T.float32(1)

    return glsl.generate(tvm.ir.GlobalVar("k"), k)


def test_vec4_loads_and_stores_where_aligned():
    k = _kernel()
    src = k.source
    body = src.split("void main() {")[1]
    # one vec4 view per float buffer reached by an aligned 4-lane ramp, on the same binding
    assert "layout(std430, set = 0, binding = 0) restrict readonly buffer Bv_v_A_v4 { vec4 data[]; } v_v_A_v4;" in src
    assert "binding = 2) restrict buffer Bv_v_C_v4 { vec4 data[]; }" in src
    assert "_v4" not in src.split("binding = 3")[1].split("\n")[0]  # d: mixed vector and scalar stores
    assert "v_D_v4" not in src
    # the index of a vec4 is the ramp's base / 4, simplified: no shift left where it divides exactly
    assert "v_v_A_v4.data[((v_blockIdx_x * 64) + v_threadIdx_x)]" in body
    assert "v_v_C_v4.data[((v_blockIdx_x * 64) + v_threadIdx_x)] = vec4(" in body
    # the unaligned ramp (tx * 4 + 1) stays element by element
    assert "v_B.data[((v_threadIdx_x * 4) + 1)]" in body
    # a condition without loads: both operands evaluated, no branch
    assert "all(bvec2((v_threadIdx_x < 10), (v_blockIdx_x > 0)))" in body


def test_vec4_kernel_compiles_to_valid_spirv():
    for tool in ("glslangValidator", "spirv-val"):
        if shutil.which(tool) is None:
            pytest.skip(f"{tool} is not installed (scripts/bootstrap.sh)")
    from tvmgen.compiler import vulkan

    (spirv,) = vulkan.compile_glsl([_kernel()])
    assert vulkan.spirv_val(spirv) is None
    dis = shutil.which("spirv-dis")
    if dis:
        text = subprocess.run([dis, "-"], input=spirv, capture_output=True, check=True).stdout.decode()
        assert "OpFunctionCall" not in text  # -Os: glslang's optimizer inlined the helpers
