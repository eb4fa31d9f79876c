"""Small ONNX models (random weights) that several of the CPU schedule tests build: test_schedules.py,
test_schedule_tiles.py and test_schedule_memory.py. Not a test module: they import it.
"""

from __future__ import annotations

import numpy as np

from conftest import onnx_model


def conv_params(w, name: str, cout: int, cin: int, k: int) -> list:
    """A convolution's weight W<name> [cout, cin, k, k] and bias B<name> [cout], drawn by ``w`` in that order."""
    return [w(f"W{name}", cout, cin, k, k), w(f"B{name}", cout)]


def one_conv(x, y, w, seed: int, relu: bool = False, scale: float = 0.1, **attrs):
    """A model of one convolution with a bias (random weights, ``w``'s shape, times ``scale``),
    then a ReLU if asked."""
    from onnx import TensorProto, helper, numpy_helper

    rng = np.random.default_rng(seed)
    nodes = [helper.make_node("Conv", ["x", "W", "B"], ["c" if relu else "y"], **attrs)]
    if relu:
        nodes.append(helper.make_node("Relu", ["c"], ["y"]))
    return onnx_model(
        nodes,
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, x)],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, y)],
        [
            numpy_helper.from_array((rng.standard_normal(w) * scale).astype(np.float32), "W"),
            numpy_helper.from_array(rng.standard_normal(w[0]).astype(np.float32), "B"),
        ],
    )


def stationary_3x3_model():
    """A late-stage 3x3 convolution on awkward pixels: 5 x 6 output, 3x3 x 264 -> 512 (4.9 MB of
    weights, more channels than pixels: weight-stationary), residual add and ReLU fused."""
    from onnx import TensorProto, helper, numpy_helper

    rng = np.random.default_rng(11)
    node = helper.make_node
    return onnx_model(
        [
            node("Conv", ["x", "W", "B"], ["c"], pads=[1, 1, 1, 1]),
            node("Add", ["c", "r"], ["s"]),
            node("Relu", ["s"], ["y"]),
        ],
        [
            helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, 264, 5, 6]),
            helper.make_tensor_value_info("r", TensorProto.FLOAT, [1, 512, 5, 6]),
        ],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, [1, 512, 5, 6])],
        [
            numpy_helper.from_array((rng.standard_normal((512, 264, 3, 3)) * 0.02).astype(np.float32), "W"),
            numpy_helper.from_array(rng.standard_normal(512).astype(np.float32), "B"),
        ],
    )
