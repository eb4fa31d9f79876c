"""cpu_speed.py's models, made here (nothing is downloaded): the model file each row measures, and its seeded
inputs."""

from __future__ import annotations

from pathlib import Path

SEED = 0


def make_builtin(path: Path) -> dict:
    import onnx

    from tvmgen.frontends.builtin import mobilenet_onnx

    onnx.save(mobilenet_onnx(), str(path))
    return {"input": "1x3x224x224 float32 (NCHW)"}


def make_torch_mobilenetv2(path: Path) -> dict:
    """MobileNetV2 (Sandler et al. 2018) at width 1.0 with random weights and random BN statistics."""
    import torch
    from torch import nn

    torch.manual_seed(SEED)

    def conv_bn(cin, cout, k, stride, groups=1, act=True):
        layers = [nn.Conv2d(cin, cout, k, stride, k // 2, groups=groups, bias=False), nn.BatchNorm2d(cout)]
        if act:
            layers.append(nn.ReLU6(inplace=True))
        return layers

    class InvertedResidual(nn.Module):
        def __init__(self, cin, cout, stride, expand):
            super().__init__()
            hidden = cin * expand
            layers = conv_bn(cin, hidden, 1, 1) if expand != 1 else []
            layers += conv_bn(hidden, hidden, 3, stride, groups=hidden)
            layers += conv_bn(hidden, cout, 1, 1, act=False)
            self.body = nn.Sequential(*layers)
            self.residual = stride == 1 and cin == cout

        def forward(self, x):
            y = self.body(x)
            return x + y if self.residual else y

    # (expansion t, channels c, repeats n, first stride s) from the paper
    config = [(1, 16, 1, 1), (6, 24, 2, 2), (6, 32, 3, 2), (6, 64, 4, 2), (6, 96, 3, 1), (6, 160, 3, 2), (6, 320, 1, 1)]
    layers = conv_bn(3, 32, 3, 2)
    cin = 32
    for t, c, n, s in config:
        for i in range(n):
            layers.append(InvertedResidual(cin, c, s if i == 0 else 1, t))
            cin = c
    layers += conv_bn(cin, 1280, 1, 1)
    model = nn.Sequential(*layers, nn.AdaptiveAvgPool2d(1), nn.Flatten(), nn.Dropout(0.2), nn.Linear(1280, 1000))
    with torch.no_grad():  # non-trivial batch-norm statistics, so folding them is exercised
        for m in model.modules():
            if isinstance(m, nn.BatchNorm2d):
                m.running_mean.uniform_(-0.1, 0.1)
                m.running_var.uniform_(0.5, 1.5)
                m.weight.uniform_(0.5, 1.5)
                m.bias.uniform_(-0.1, 0.1)
    model.eval()
    example = torch.randn(1, 3, 224, 224)
    kwargs = dict(input_names=["input"], output_names=["logits"], opset_version=17, do_constant_folding=True)
    try:  # torch >= 2.9 defaults to the dynamo exporter, which needs onnxscript
        torch.onnx.export(model, (example,), str(path), dynamo=False, **kwargs)
        exporter = "torch.onnx.export(dynamo=False)"
    except TypeError:  # older torch: no dynamo argument
        torch.onnx.export(model, (example,), str(path), **kwargs)
        exporter = "torch.onnx.export"
    params = sum(p.numel() for p in model.parameters())
    return {"input": "1x3x224x224 float32 (NCHW)", "params": params, "exporter": exporter, "torch": torch.__version__}


def make_keras_cnn(path: Path) -> dict:
    """A MobileNet-like Keras CNN with He-scaled weights and random BN statistics (no vanishing activations)."""
    import numpy as np
    import tensorflow as tf

    tf.get_logger().setLevel("ERROR")
    keras = tf.keras
    keras.utils.set_random_seed(SEED)
    L = keras.layers
    he = "he_normal"
    # Keras computes a depthwise kernel's fan-in over all channels; a 3x3 depthwise filter has 9 inputs.
    dw = keras.initializers.RandomNormal(stddev=(2.0 / 9) ** 0.5)
    inp = keras.Input(shape=(224, 224, 3), batch_size=1, name="input")
    x = L.Conv2D(32, 3, strides=2, padding="same", use_bias=False, kernel_initializer=he)(inp)
    x = L.BatchNormalization()(x)
    x = L.ReLU(6.0)(x)
    for filters, stride in [(64, 1), (128, 2), (128, 1), (256, 2), (256, 1), (512, 2)]:
        x = L.DepthwiseConv2D(3, strides=stride, padding="same", use_bias=False, depthwise_initializer=dw)(x)
        x = L.BatchNormalization()(x)
        x = L.ReLU(6.0)(x)
        x = L.Conv2D(filters, 1, padding="same", use_bias=False, kernel_initializer=he)(x)
        x = L.BatchNormalization()(x)
        x = L.ReLU(6.0)(x)
    x = L.MaxPooling2D(2)(x)
    x = L.AveragePooling2D(2, padding="same")(x)
    x = L.GlobalAveragePooling2D()(x)
    x = L.Dense(256, activation="relu", kernel_initializer=he)(x)
    out = L.Dense(1000, activation="softmax", name="probs")(x)
    model = keras.Model(inp, out)
    rng = np.random.default_rng(SEED)
    for layer in model.layers:  # weights order: gamma, beta, moving mean, moving variance
        if isinstance(layer, L.BatchNormalization):
            c = layer.gamma.shape[0]
            layer.set_weights(
                [
                    rng.uniform(0.5, 1.5, c),
                    rng.uniform(-0.1, 0.1, c),
                    rng.uniform(-0.1, 0.1, c),
                    rng.uniform(0.5, 1.5, c),
                ]
            )
    try:
        converter = tf.lite.TFLiteConverter.from_keras_model(model)
        blob = converter.convert()
        how = "TFLiteConverter.from_keras_model"
    except Exception:  # Keras 3 variants where from_keras_model fails: go through a concrete function
        fn = tf.function(lambda x: model(x, training=False))
        concrete = fn.get_concrete_function(tf.TensorSpec([1, 224, 224, 3], tf.float32, name="input"))
        blob = tf.lite.TFLiteConverter.from_concrete_functions([concrete], model).convert()
        how = "TFLiteConverter.from_concrete_functions"
    path.write_bytes(blob)
    return {
        "input": "1x224x224x3 float32 (NHWC)",
        "params": int(model.count_params()),
        "converter": how,
        "tensorflow": tf.__version__,
    }


def make_gemm(path: Path, size: int) -> dict:
    """Y = A @ B with A and B both inputs, so no side can pre-pack a constant operand."""
    import onnx
    from onnx import TensorProto, helper

    n = size
    graph = helper.make_graph(
        [helper.make_node("MatMul", ["A", "B"], ["Y"])],
        f"gemm{n}",
        [
            helper.make_tensor_value_info("A", TensorProto.FLOAT, [n, n]),
            helper.make_tensor_value_info("B", TensorProto.FLOAT, [n, n]),
        ],
        [helper.make_tensor_value_info("Y", TensorProto.FLOAT, [n, n])],
    )
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    model.ir_version = 8
    onnx.save(model, str(path))
    return {"input": f"A, B: {n}x{n} float32", "flops": 2 * n**3}


def make_head(path: Path, shape: tuple[int, int, int]) -> dict:
    """A classifier head, y = x @ W + b with W a constant [C, N]: few rows (T) against many columns, as a CTC
    recognizer's over its character set. With the default 4 x 1024 x 16384 its 67 MB of weights are beyond
    the caches and every run streams them from memory: 2 FLOPs per 4-byte weight per row, so its speed is the
    memory's, reported in GB/s of weights against the machine's measured read bandwidth."""
    import numpy as np
    import onnx
    from onnx import TensorProto, helper, numpy_helper

    t, c, n = shape
    rng = np.random.default_rng(SEED)
    w = numpy_helper.from_array((rng.standard_normal((c, n)) * c**-0.5).astype(np.float32), "w")
    b = numpy_helper.from_array((rng.standard_normal(n) * 0.1).astype(np.float32), "b")
    graph = helper.make_graph(
        [helper.make_node("MatMul", ["x", "w"], ["h"]), helper.make_node("Add", ["h", "b"], ["y"])],
        "head",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, t, c])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, [1, t, n])],
        [w, b],
    )
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    model.ir_version = 8
    onnx.save(model, str(path))
    return {
        "input": f"1x{t}x{c} float32",
        "weights": f"{c}x{n} float32",
        "flops": 2 * t * c * n,
        "weight_bytes": 4 * c * n,
    }


def make_int8_ffn(path: Path) -> dict:
    """A float feed-forward block, then onnxruntime's own dynamic quantiser: 8-bit weights, 8-bit
    activations quantised per run (DynamicQuantizeLinear), int32 MatMulInteger."""
    import numpy as np
    import onnx
    from onnx import TensorProto, helper, numpy_helper
    from onnxruntime.quantization import QuantType, quantize_dynamic

    tokens, width, hidden = 16, 768, 3072
    rng = np.random.default_rng(SEED)

    def const(name, *shape, scale=1.0):
        return numpy_helper.from_array((rng.standard_normal(shape) * scale).astype(np.float32), name)

    inits = [
        const("w1", width, hidden, scale=width**-0.5),
        const("b1", hidden, scale=0.1),
        const("w2", hidden, width, scale=hidden**-0.5),
        const("b2", width, scale=0.1),
    ]
    nodes = [
        helper.make_node("MatMul", ["x", "w1"], ["h"]),
        helper.make_node("Add", ["h", "b1"], ["hb"]),
        helper.make_node("Relu", ["hb"], ["r"]),
        helper.make_node("MatMul", ["r", "w2"], ["o"]),
        helper.make_node("Add", ["o", "b2"], ["y"]),
    ]
    graph = helper.make_graph(
        nodes,
        "ffn",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, [tokens, width])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, [tokens, width])],
        inits,
    )
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    model.ir_version = 8
    fp32 = path.with_suffix(".fp32.onnx")
    onnx.save(model, str(fp32))
    quantize_dynamic(str(fp32), str(path), weight_type=QuantType.QInt8)
    fp32.unlink()
    return {
        "input": f"{tokens}x{width} float32",
        "quantizer": "onnxruntime.quantization.quantize_dynamic (QInt8)",
        "macs": 2 * tokens * width * hidden,
    }


MAKERS = {
    "builtin": make_builtin,
    "torch": make_torch_mobilenetv2,
    "keras": make_keras_cnn,
    "int8": make_int8_ffn,
}  # gemm and head: their sizes too
