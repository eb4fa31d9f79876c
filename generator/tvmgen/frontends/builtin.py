"""Built-in models, defined in code with deterministic weights: nothing needs the network.

``builtin:mobilenet`` is a MobileNet-v1-style classifier (depthwise-separable blocks with
batch norm and ReLU6, global pooling, a 1000-way classifier, softmax) at width 0.5, written
as ONNX so it follows the same path as a user's ONNX file and is checked with onnxruntime.

``builtin:tiny`` is the same network cut to two blocks at 32x32 with 10 classes: it compiles in a
couple of seconds, for trying the tools (and for the tests of plumbing: options, errors, layouts).
"""

from __future__ import annotations

from pathlib import Path

import numpy as np

from tvmgen.core.errors import InputError

# (output channels, stride) of each depthwise-separable block, MobileNet v1 at width 0.5.
MOBILENET_BLOCKS = [(32, 1), (64, 2), (64, 1), (128, 2), (128, 1), (256, 2), (256, 1), (256, 1), (512, 2), (512, 1)]


# The tiny variant: two blocks, for a model that compiles in seconds.
TINY_BLOCKS = [(16, 2), (32, 2)]


def mobilenet_onnx(
    resolution: int = 224, classes: int = 1000, seed: int = 0, blocks=MOBILENET_BLOCKS, name: str = "mobilenet"
):
    import onnx
    from onnx import TensorProto, helper, numpy_helper

    rng = np.random.default_rng(seed)
    nodes, inits = [], []

    def const(name, arr):
        inits.append(numpy_helper.from_array(arr.astype(np.float32), name))
        return name

    def conv_bn_relu6(x, cin, cout, k, stride, group, tag):
        fan_in = cin // group * k * k
        w = const(f"{tag}.w", rng.standard_normal((cout, cin // group, k, k)) * np.sqrt(2.0 / fan_in))
        nodes.append(
            helper.make_node(
                "Conv",
                [x, w],
                [f"{tag}.conv"],
                kernel_shape=[k, k],
                strides=[stride, stride],
                pads=[k // 2] * 4,
                group=group,
                name=f"{tag}/conv",
            )
        )
        scale = const(f"{tag}.gamma", rng.uniform(0.5, 1.5, cout))
        bias = const(f"{tag}.beta", rng.uniform(-0.1, 0.1, cout))
        mean = const(f"{tag}.mean", rng.uniform(-0.1, 0.1, cout))
        var = const(f"{tag}.var", rng.uniform(0.5, 1.5, cout))
        nodes.append(
            helper.make_node(
                "BatchNormalization",
                [f"{tag}.conv", scale, bias, mean, var],
                [f"{tag}.bn"],
                epsilon=1e-5,
                name=f"{tag}/bn",
            )
        )
        lo, hi = const(f"{tag}.lo", np.array(0.0)), const(f"{tag}.hi", np.array(6.0))
        nodes.append(helper.make_node("Clip", [f"{tag}.bn", lo, hi], [f"{tag}.out"], name=f"{tag}/relu6"))
        return f"{tag}.out"

    x = conv_bn_relu6("input", 3, 16, 3, 2, 1, "stem")
    cin = 16
    for i, (cout, stride) in enumerate(blocks):
        x = conv_bn_relu6(x, cin, cin, 3, stride, cin, f"block{i}.dw")
        x = conv_bn_relu6(x, cin, cout, 1, 1, 1, f"block{i}.pw")
        cin = cout
    nodes.append(helper.make_node("GlobalAveragePool", [x], ["pool"], name="pool"))
    nodes.append(helper.make_node("Flatten", ["pool"], ["flat"], axis=1, name="flatten"))
    fc_w = const("fc.w", rng.standard_normal((classes, cin)) * np.sqrt(1.0 / cin))
    fc_b = const("fc.b", rng.uniform(-0.1, 0.1, classes))
    nodes.append(helper.make_node("Gemm", ["flat", fc_w, fc_b], ["logits"], transB=1, name="fc"))
    nodes.append(helper.make_node("Softmax", ["logits"], ["probs"], axis=1, name="softmax"))

    graph = helper.make_graph(
        nodes,
        f"tvmgen_builtin_{name}",
        [helper.make_tensor_value_info("input", TensorProto.FLOAT, [1, 3, resolution, resolution])],
        [helper.make_tensor_value_info("probs", TensorProto.FLOAT, [1, classes])],
        inits,
    )
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)], producer_name="tvmgen-builtin")
    model.ir_version = 8
    onnx.checker.check_model(model)
    return model


def tiny_onnx():
    return mobilenet_onnx(resolution=32, classes=10, blocks=TINY_BLOCKS, name="tiny")


BUILTINS = {"mobilenet": mobilenet_onnx, "tiny": tiny_onnx}


def materialize(spec: str, directory: Path) -> Path:
    """Write builtin:NAME as an ONNX file in ``directory`` and return its path."""
    name = spec.split(":", 1)[1]
    if name not in BUILTINS:
        raise InputError(
            f"unknown built-in model {spec!r}", "built-in models: " + ", ".join(f"builtin:{n}" for n in BUILTINS)
        )
    import onnx

    path = directory / f"{name}.onnx"
    onnx.save(BUILTINS[name](), str(path))
    return path
