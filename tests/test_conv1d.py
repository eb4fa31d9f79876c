"""1-D convolutions (ONNX Conv with a 1-D kernel) go through the 2-D convolution path
(compiler.conv1d): NHWC, tiled and vectorised; results match onnxruntime for strides, padding,
dilation, groups and bias, on this CPU and for aarch64 NEON (prepared and scheduled)."""

from __future__ import annotations

import numpy as np
import pytest
from onnx import TensorProto, helper, numpy_helper

from conftest import onnx_model, save_onnx
from test_frontends import assert_close, compile_and_run
from test_schedules import prepared_and_scheduled

CASES = {  # name: (in channels, out channels, width, kernel, stride, pads, dilation, groups, bias)
    "audio_front_end": (40, 64, 50, 3, 1, (1, 1), 1, 1, True),
    "strided_asymmetric_pad": (12, 29, 33, 5, 2, (2, 1), 1, 1, True),
    "dilated_no_bias": (16, 32, 40, 3, 1, (2, 2), 2, 1, False),
    "depthwise": (24, 24, 31, 5, 1, (2, 2), 1, 24, True),
    "grouped": (16, 32, 20, 3, 1, (0, 0), 1, 4, False),
}


def conv1d_model(cin, cout, width, k, stride, pads, dilation, groups, bias):
    rng = np.random.default_rng(0)
    inits = [numpy_helper.from_array(rng.normal(0, 0.3, (cout, cin // groups, k)).astype(np.float32), "w")]
    inputs = ["x", "w"]
    if bias:
        inits.append(numpy_helper.from_array(rng.normal(0, 0.3, cout).astype(np.float32), "b"))
        inputs.append("b")
    node = helper.make_node(
        "Conv", inputs, ["c"], kernel_shape=[k], strides=[stride], pads=list(pads), dilations=[dilation], group=groups
    )
    relu = helper.make_node("Relu", ["c"], ["y"])
    return onnx_model(
        [node, relu],
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, cin, width])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, None)],
        inits,
    )


@pytest.mark.parametrize("name", sorted(CASES))
def test_conv1d_matches_onnxruntime_as_a_scheduled_2d_convolution(name, tmp_path):
    path = save_onnx(conv1d_model(*CASES[name]), tmp_path / f"{name}.onnx")
    for platform in ("host", "linux-aarch64"):
        mod, done, left = prepared_and_scheduled(path, platform)
        scripts = "".join(f.script(show_meta=False) for f in mod.functions.values())
        assert "conv1d" not in scripts and "conv2d" in scripts
        assert not [f for f in left if "conv" in f], left
        assert any("conv2d" in f for f in done), done
    _, _, actual, expected = compile_and_run(path, tmp_path)
    assert_close(actual, expected, atol=1e-4, rtol=1e-4)


def test_axes_counted_from_the_end_keep_the_layout_conversion(tvmgen, tmp_path):
    """silero-vad's shape: a convolution, then squeeze / mean over axes counted from the end (-1).
    TVM's layout conversion failed on them with std::bad_alloc and the CPU build fell back to no
    NHWC conversion; rewrites.non_negative_axes writes them from the start first."""
    rng = np.random.default_rng(0)
    w = numpy_helper.from_array(rng.standard_normal((16, 8, 1, 3)).astype(np.float32), "w")
    two = numpy_helper.from_array(np.array([2], np.int64), "two")
    last = numpy_helper.from_array(np.array([-1], np.int64), "last")
    nodes = [
        helper.make_node("Conv", ["x", "w"], ["c"], pads=[0, 1, 0, 1]),
        helper.make_node("Squeeze", ["c", "two"], ["q"]),
        helper.make_node("Relu", ["q"], ["r"]),
        helper.make_node("ReduceMean", ["r"], ["m"], axes=[-1], keepdims=1),
        helper.make_node("Squeeze", ["m", "last"], ["y"]),
        helper.make_node("Concat", ["r", "r"], ["z"], axis=-1),
    ]
    model = onnx_model(
        nodes,
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, 8, 1, 5])],
        [
            helper.make_tensor_value_info("y", TensorProto.FLOAT, None),
            helper.make_tensor_value_info("z", TensorProto.FLOAT, None),
        ],
        [w, two, last],
    )
    path = save_onnx(model, tmp_path / "neg_axes.onnx")
    r = tvmgen("compile", path, "--check", "-o", tmp_path / "a")
    assert r.returncode == 0, r.stderr
    assert "failed" not in r.stderr and "ok y: max abs error" in r.stderr and "ok z: max abs error" in r.stderr
