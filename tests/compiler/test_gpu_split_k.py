"""compiler.gpu.split_k: products with few output tiles and a long reduction sum it across a work-group's
threads (which products, the kernels it makes, the results on PoCL and lavapipe against onnxruntime), and
normalisations with short rows are one kernel on the GPU."""

from __future__ import annotations

import numpy as np
import pytest

from conftest import run_native, save_onnx
from tvmgen import frontends
from tvmgen.compiler import gpu
from tvmgen.compiler.build import BuildOptions, compile_to_artifact
from tvmgen.compiler.gpu import split_k
from tvmgen.compiler.targets.platforms import PLATFORMS, make_target, target_dict


def _target(device, family="generic"):
    return make_target(target_dict(PLATFORMS["host"], device, family))


def _conv2d(c, side, co, k, stride=1):
    from tvm import te, topi

    x = te.placeholder((1, c, side, side), "float32", "x")
    w = te.placeholder((co, c, k, k), "float32", "w")
    b = te.placeholder((1, co, 1, 1), "float32", "b")
    y = topi.nn.conv2d_nchw(x, w, stride, k // 2, 1)
    z = te.compute(
        y.shape, lambda n, o, i, j: te.sigmoid(y[n, o, i, j] + b[0, o, 0, 0]) * (y[n, o, i, j] + b[0, o, 0, 0])
    )
    return te.create_prim_func([x, w, b, z])


def _conv1d(c, length, co, k, stride):
    from tvm import te, topi

    x = te.placeholder((1, c, length), "float32", "x")
    w = te.placeholder((co, c, k), "float32", "w")
    return te.create_prim_func([x, w, topi.nn.relu(topi.nn.conv1d(x, w, stride, k // 2))])


def _kernels(sch, target) -> list[str]:
    import tvm

    mod = tvm.IRModule({"main": sch.mod["main"].with_attr("global_symbol", "k")})
    src = tvm.tirx.build(mod, target=target).imports[0].inspect_source()
    return [ln for ln in src.splitlines() if ln.startswith("__kernel void") and ln.endswith("{")], src


def test_which_products_split_their_reduction():
    generic, desktop = _target("opencl"), _target("opencl", "desktop")
    # a detector's neck: 3 x 3 over 32 channels on 40 x 40 (50 of the generic family's 32 x 32 tiles, 288 products)
    neck = _conv2d(32, 40, 32, 3)
    assert split_k.schedule(neck, generic) is not None
    # an audio network's strided 1-D convolution: 57 frames x 256 channels, 1,280 products per output
    audio = _conv1d(256, 113, 256, 5, 2)
    assert split_k.schedule(audio, generic) is not None and split_k.schedule(audio, _target("vulkan")) is not None
    # many tiles: dlight's schedule (a larger tile reuses each loaded value more)
    assert split_k.schedule(_conv2d(64, 80, 64, 3), generic) is None
    # the desktop family's tiles are 64 x 32: a map that is many generic tiles is few desktop ones
    mid = _conv2d(64, 48, 64, 3)  # 2304 x 64 outputs: 144 generic tiles, 72 desktop ones; 576 products
    assert split_k.schedule(mid, generic) is None and split_k.schedule(mid, desktop) is not None
    # a desktop GPU (20-140 compute units) wants more groups where each would walk a long reduction
    long = _conv1d(128, 1024, 128, 5, 1)  # 1024 x 128 outputs: 128 generic tiles, 64 desktop ones; 640 products
    assert split_k.schedule(long, generic) is None and split_k.schedule(long, desktop) is not None
    short = _conv2d(32, 80, 32, 3)  # 6400 x 32 outputs: 100 desktop tiles of 288 products: dlight's
    assert split_k.schedule(short, desktop) is None
    small = _conv2d(64, 24, 64, 3)  # 576 x 64: 36 generic tiles
    assert split_k.schedule(small, generic) is not None
    # a 1 x 1 convolution over 256 channels on an 8 x 8 map: unit kernel axes
    assert split_k.schedule(_conv2d(256, 8, 64, 1), generic) is not None
    # a short reduction (a 1 x 1 convolution over 64 channels) keeps dlight's schedule
    assert split_k.schedule(_conv2d(64, 8, 64, 1), generic) is None
    # CUDA keeps TVM's own schedules (the reference the OpenCL and Vulkan builds are measured against)
    rule = split_k.split_k_rule()
    assert rule.apply(neck, make_target({"kind": "cuda"}), False) is None
    assert rule.apply(neck, generic, False) is not None
    assert type(gpu.default_rules(generic)[0]).__name__ == "SplitK"
    assert all(type(r).__name__ != "SplitK" for r in gpu.default_rules(make_target({"kind": "cuda"})))


def test_the_split_kernel_sums_across_threads_and_runs_its_epilogue_once():
    target = _target("opencl")
    sch = split_k.schedule(_conv2d(32, 40, 32, 3), target)
    kernels, src = _kernels(sch, target)
    assert len(kernels) == 1  # the products, the sum across threads and the SiLU epilogue: one kernel
    assert "red_buf" in src and "barrier(CLK_LOCAL_MEM_FENCE)" in src  # the partial sums added in local memory
    assert "exp" in src  # the epilogue inlined
    need = gpu.limits.needs(sch.mod["main"])
    assert need.threads == split_k.THREADS_I * split_k.THREADS_J * split_k.THREADS_K == 256
    assert need.over(gpu.gpu_limits(target)) == "" and need.over(gpu.gpu_limits(_target("vulkan"))) == ""


def test_a_layer_norm_is_one_kernel():
    """A normalisation over short rows (64 values) writes every element of the row from two sums: not the
    short-reduction rule's (a kernel per sum and one for the elements, one thread per row), dlight's
    GeneralReduction's: one kernel, a work-group per row."""
    from tvm import te, topi
    from tvm.s_tir import dlight as dl

    x = te.placeholder((256, 64), "float32", "x")
    g = te.placeholder((64,), "float32", "g")
    b = te.placeholder((64,), "float32", "b")
    func = te.create_prim_func([x, g, b, topi.nn.layer_norm(x, g, b, axis=[1], epsilon=1e-5)])
    assert not gpu._short_reductions(func)
    target = _target("opencl")
    with target:
        sch = dl.gpu.GeneralReduction().apply(func, target, False)
    assert len(_kernels(sch, target)[0]) == 1


def _onnx_model(path):
    """A strided 1-D convolution stack (an audio front end) and a 3 x 3 convolution on a small map, with
    SiLU: every product few tiles and a long reduction."""
    from onnx import TensorProto, helper, numpy_helper

    rng = np.random.default_rng(0)

    def init(name, *shape):
        return numpy_helper.from_array((rng.standard_normal(shape) * 0.2).astype("float32"), name)

    nodes = [
        helper.make_node("Conv", ["a", "w1", "b1"], ["a1"], strides=[2], pads=[2, 2]),
        helper.make_node("Relu", ["a1"], ["r1"]),
        helper.make_node("Conv", ["r1", "w2", "b2"], ["audio"], strides=[2], pads=[2, 2]),
        helper.make_node("Conv", ["v", "w3", "b3"], ["v1"], pads=[1, 1, 1, 1]),
        helper.make_node("Sigmoid", ["v1"], ["s1"]),
        helper.make_node("Mul", ["v1", "s1"], ["image"]),
    ]
    graph = helper.make_graph(
        nodes,
        "split_k",
        [
            helper.make_tensor_value_info("a", TensorProto.FLOAT, [1, 16, 200]),
            helper.make_tensor_value_info("v", TensorProto.FLOAT, [1, 32, 12, 12]),
        ],
        [
            helper.make_tensor_value_info("audio", TensorProto.FLOAT, None),
            helper.make_tensor_value_info("image", TensorProto.FLOAT, None),
        ],
        [
            init("w1", 64, 16, 5),
            init("b1", 64),
            init("w2", 64, 64, 5),
            init("b2", 64),
            init("w3", 32, 32, 3, 3),
            init("b3", 32),
        ],
    )
    return save_onnx(helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)], ir_version=8), path)


@pytest.fixture(scope="module")
def model(tmp_path_factory):
    return _onnx_model(tmp_path_factory.mktemp("split_k") / "split_k.onnx")


def _check(runtime, art, path, tmp_path):
    import onnxruntime as ort

    rng = np.random.default_rng(1)
    inputs = {
        "a": rng.standard_normal((1, 16, 200)).astype("float32"),
        "v": rng.standard_normal((1, 32, 12, 12)).astype("float32"),
    }
    want = ort.InferenceSession(str(path)).run(None, inputs)
    proc, outs = run_native(runtime, art, inputs, tmp_path, repeat=2)
    assert proc.returncode == 0, proc.stderr
    for got, ref in zip(outs, want):
        np.testing.assert_allclose(got, ref, atol=2e-4, rtol=2e-4)


def test_split_reductions_on_pocl_match_onnxruntime(ocl_runtime, opencl_lib, model, tmp_path):
    art = tmp_path / "ocl"
    compile_to_artifact(frontends.load(model, []), BuildOptions(PLATFORMS["host"], "opencl"), art, True, {"name": "sk"})
    src = (art / "model.so").read_bytes()
    assert src.count(b"red_buf") >= 3  # the three convolutions' sums across threads
    _check(ocl_runtime, art, model, tmp_path)


def test_split_reductions_on_lavapipe_match_onnxruntime(host_runtime, model, tmp_path):
    import shutil

    from conftest import unavailable
    from helpers import vulkan_device

    if shutil.which("glslangValidator") is None:
        unavailable("glslangValidator is not installed (apt-get install glslang-tools; scripts/bootstrap.sh)")
    vulkan_device(host_runtime)
    art = tmp_path / "vk"
    compile_to_artifact(frontends.load(model, []), BuildOptions(PLATFORMS["host"], "vulkan"), art, True, {"name": "sk"})
    _check(host_runtime, art, model, tmp_path)


def test_a_split_that_fails_is_named_as_tvmgens_rule():
    """A kernel the split reduction could not schedule goes to dlight's Matmul, and the compile output says
    whose rule failed."""
    (line,) = gpu.rule_failures_summary([{"kernel": "k", "rule": "SplitK", "error": "e", "scheduled_by": "Matmul"}])
    assert line == "tvmgen's SplitK rule failed on 1 kernel(s) (k): scheduled by Matmul instead"
    (line,) = gpu.rule_failures_summary(
        [{"kernel": "k", "rule": "Reduction", "error": "e", "scheduled_by": "Fallback"}]
    )
    assert line.startswith("dlight's Reduction rule failed on 1 kernel(s) (k): scheduled by Fallback instead")
