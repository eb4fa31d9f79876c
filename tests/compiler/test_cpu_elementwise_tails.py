"""Elementwise kernels over a short innermost axis (issue 37, keras_mobilenet_v2_int8's input
quantisation: an NHWC image's 3 channels were vectors of 3 floats): the injective rule fuses the
innermost loops into one vector loop when every buffer is walked contiguously by them
(schedule_rules._contiguous_tail), and keeps them apart when an operand is per channel. For
AVX-512, AVX2 and NEON targets whatever CPU runs the tests; against onnxruntime here. And the
8-bit dot-product kernels' FLOPs, counted where they also read a residual or write 8 bits."""

from __future__ import annotations

import re

import numpy as np
import pytest
from onnx import TensorProto, helper, numpy_helper

from conftest import onnx_model, save_onnx
from helpers import CPU_TARGETS, assert_close, compile_and_run, prepared_and_scheduled

SHAPE = [1, 16, 16, 3]


def elementwise_model(per_channel: bool):
    """y = relu(x * 2 + b): b a scalar (every buffer contiguous), or one value per channel."""
    b = np.array([0.5, -0.25, 1.0], np.float32) if per_channel else np.array(0.5, np.float32)
    nodes = [
        helper.make_node("Mul", ["x", "two"], ["m"]),
        helper.make_node("Add", ["m", "b"], ["a"]),
        helper.make_node("Relu", ["a"], ["y"]),
    ]
    return onnx_model(
        nodes,
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, SHAPE)],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, SHAPE)],
        [numpy_helper.from_array(np.array(2.0, np.float32), "two"), numpy_helper.from_array(b, "b")],
    )


def vector_extents(mod, done) -> list[int]:
    exts = []
    for name in done:
        text = mod[name].script()
        exts += [int(e) for e in re.findall(r"T\.vectorized\(T\.int64\((\d+)\)\)", text)]
    return exts


@pytest.mark.parametrize("per_channel", [False, True], ids=["scalar_operands", "per_channel_operand"])
@pytest.mark.parametrize("cpu", sorted(CPU_TARGETS))
def test_short_innermost_axis_is_fused_into_whole_vectors_where_contiguous(cpu, per_channel, tmp_path):
    target_spec, (lanes, _), _ = CPU_TARGETS[cpu]
    path = save_onnx(elementwise_model(per_channel), tmp_path / "e.onnx")
    mod, done, left = prepared_and_scheduled(path, target_spec=target_spec)
    assert not left, left
    exts = vector_extents(mod, done)
    assert exts, [mod[n].script() for n in done]
    if per_channel:  # b[c] read across columns would be a gather: the 3 channels stay the vector
        assert exts == [3], exts
    else:  # rows x 3 values: at least one whole vector
        assert all(e >= lanes for e in exts), (exts, lanes)


@pytest.mark.parametrize("per_channel", [False, True], ids=["scalar_operands", "per_channel_operand"])
def test_short_innermost_axis_matches_onnxruntime(per_channel, tmp_path):
    path = save_onnx(elementwise_model(per_channel), tmp_path / "e.onnx")
    _, _, actual, expected = compile_and_run(path, tmp_path)
    assert_close(actual, expected, atol=1e-6, rtol=1e-6)


def test_dot_flops_counted_with_a_residual_and_an_8_bit_result():
    """The FLOPs of a dot-product kernel that also reads an 8-bit residual [.., N] and writes 8
    bits [.., N] (a full-integer model's projection: both shapes 8-bit, besides the activations
    [.., K]): 2 x rows x K x N from the packed weights, not 0."""
    import tvm
    from tvm import te

    from tvmgen.compiler import kernels

    h, w, k, n, lanes = 4, 7, 96, 32, 16
    a = te.placeholder((1, h, w, k), "uint8", "A")
    b = te.placeholder((n // lanes, k // 4, lanes, 4), "int8", "B")
    r = te.placeholder((1, h, w, n), "int8", "R")
    kk = te.reduce_axis((0, k), "k")
    acc = te.compute(
        (1, h, w, n),
        lambda i, y, x, j: te.sum(
            a[i, y, x, kk].astype("int32") * b[j // lanes, kk // 4, j % lanes, kk % 4].astype("int32"), axis=kk
        ),
    )
    out = te.compute((1, h, w, n), lambda *i: (acc(*i) + r(*i).astype("int32")).astype("int8"))
    func = te.create_prim_func([a, b, r, out])
    assert kernels._dot_flops(func) == 2.0 * h * w * k * n
    assert isinstance(tvm.IRModule({"main": func}), tvm.IRModule)
