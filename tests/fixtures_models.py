"""The models the tests make in code (nothing is downloaded): ONNX graphs written with onnx.helper, a
PyTorch and a Keras CNN, and their exports (ONNX, PT2, TFLite, frozen graph, SavedModel). Registered by
conftest.py."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest


def onnx_model(nodes, inputs, outputs, initializers=(), opset=17):
    from onnx import helper

    graph = helper.make_graph(nodes, "test", inputs, outputs, list(initializers))
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", opset)])
    model.ir_version = 8
    return model


def save_onnx(model, path: Path) -> Path:
    import onnx

    onnx.save(model, str(path))
    return path


def branching_model(path: Path) -> Path:
    """y = x + 1 where sum(x) > 0, else x - 1: an ONNX If, which main keeps as a branch."""
    import onnx
    from onnx import TensorProto, helper

    def branch(op, out):
        one = helper.make_tensor(f"one_{out}", TensorProto.FLOAT, [1], [1.0])
        return helper.make_graph(
            [helper.make_node(op, ["x", f"one_{out}"], [out])],
            out,
            [],
            [helper.make_tensor_value_info(out, TensorProto.FLOAT, [1, 4])],
            initializer=[one],
        )

    nodes = [
        helper.make_node("ReduceSum", ["x"], ["s"], keepdims=0),
        helper.make_node("Greater", ["s", "zero"], ["c"]),
        helper.make_node("If", ["c"], ["y"], then_branch=branch("Add", "t"), else_branch=branch("Sub", "e")),
    ]
    graph = helper.make_graph(
        nodes,
        "branching",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, 4])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, [1, 4])],
        initializer=[helper.make_tensor("zero", TensorProto.FLOAT, [], [0.0])],
    )
    onnx.save(helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)]), path)
    return path


def single_op_models() -> dict:
    """Name -> ONNX model with one operator (or a short chain) that mobile models spend time in."""
    from onnx import TensorProto, helper, numpy_helper

    rng = np.random.default_rng(1)
    F = TensorProto.FLOAT

    def vi(name, shape):
        return helper.make_tensor_value_info(name, F, shape)

    def w(name, *shape):
        return numpy_helper.from_array(rng.standard_normal(shape).astype(np.float32), name)

    x4 = vi("x", [1, 8, 16, 16])
    models = {
        "conv3x3": onnx_model(
            [helper.make_node("Conv", ["x", "W", "B"], ["y"], pads=[1, 1, 1, 1])],
            [x4],
            [vi("y", [1, 16, 16, 16])],
            [w("W", 16, 8, 3, 3), w("B", 16)],
        ),
        "conv_depthwise": onnx_model(
            [helper.make_node("Conv", ["x", "W"], ["y"], pads=[1, 1, 1, 1], group=8, strides=[2, 2])],
            [x4],
            [vi("y", [1, 8, 8, 8])],
            [w("W", 8, 1, 3, 3)],
        ),
        "conv1x1": onnx_model(
            [helper.make_node("Conv", ["x", "W"], ["y"])], [x4], [vi("y", [1, 32, 16, 16])], [w("W", 32, 8, 1, 1)]
        ),
        "gemm": onnx_model(
            [helper.make_node("Gemm", ["a", "W", "B"], ["y"], transB=1)],
            [vi("a", [4, 64])],
            [vi("y", [4, 32])],
            [w("W", 32, 64), w("B", 32)],
        ),
        "matmul": onnx_model(
            [helper.make_node("MatMul", ["a", "b"], ["y"])],
            [vi("a", [2, 8, 16]), vi("b", [2, 16, 4])],
            [vi("y", [2, 8, 4])],
        ),
        "add_relu6": onnx_model(
            [helper.make_node("Add", ["x", "b"], ["s"]), helper.make_node("Clip", ["s", "lo", "hi"], ["y"])],
            [x4],
            [vi("y", [1, 8, 16, 16])],
            [
                w("b", 8, 1, 1),
                numpy_helper.from_array(np.array(0, np.float32), "lo"),
                numpy_helper.from_array(np.array(6, np.float32), "hi"),
            ],
        ),
        "maxpool": onnx_model(
            [helper.make_node("MaxPool", ["x"], ["y"], kernel_shape=[3, 3], strides=[2, 2], pads=[1, 1, 1, 1])],
            [x4],
            [vi("y", [1, 8, 8, 8])],
        ),
        "avgpool_global": onnx_model(
            [helper.make_node("GlobalAveragePool", ["x"], ["y"])], [x4], [vi("y", [1, 8, 1, 1])]
        ),
        "softmax": onnx_model(
            [helper.make_node("Softmax", ["a"], ["y"], axis=-1)], [vi("a", [3, 10])], [vi("y", [3, 10])]
        ),
        "concat_transpose": onnx_model(
            [
                helper.make_node("Concat", ["x", "x"], ["c"], axis=1),
                helper.make_node("Transpose", ["c"], ["y"], perm=[0, 2, 3, 1]),
            ],
            [x4],
            [vi("y", [1, 16, 16, 16])],
        ),
        "two_outputs": onnx_model(
            [helper.make_node("Relu", ["a"], ["r"]), helper.make_node("Sigmoid", ["a"], ["s"])],
            [vi("a", [2, 5])],
            [vi("r", [2, 5]), vi("s", [2, 5])],
        ),
    }
    # MobileNetV3's depthwise block: the epilogue reads the window sum twice (last: the others' weights stay)
    models["conv_dw5_hardswish"] = onnx_model(
        [
            helper.make_node("Conv", ["x16", "W", "B"], ["c"], pads=[2, 2, 2, 2], group=16),
            helper.make_node("HardSwish", ["c"], ["y"]),
        ],
        [vi("x16", [1, 16, 12, 12])],
        [vi("y", [1, 16, 12, 12])],
        [w("W", 16, 1, 5, 5), w("B", 16)],
    )
    return models


@pytest.fixture(scope="session")
def models_dir(tmp_path_factory) -> Path:
    return tmp_path_factory.mktemp("models")


@pytest.fixture(scope="session")
def builtin_onnx(models_dir) -> Path:
    from tvmgen.frontends.builtin import materialize

    return materialize("builtin:mobilenet", models_dir)


def torch_mobilenet_like():
    """A small MobileNetV2-style torch module (inverted residuals, ReLU6, 'same' padding)."""
    import torch
    from torch import nn

    def block(cin, cout, stride, expand=4):
        hidden = cin * expand
        return nn.Sequential(
            nn.Conv2d(cin, hidden, 1, bias=False),
            nn.BatchNorm2d(hidden),
            nn.ReLU6(),
            nn.Conv2d(hidden, hidden, 3, stride, 1, groups=hidden, bias=False),
            nn.BatchNorm2d(hidden),
            nn.ReLU6(),
            nn.Conv2d(hidden, cout, 1, bias=False),
            nn.BatchNorm2d(cout),
        )

    class Net(nn.Module):
        def __init__(self):
            super().__init__()
            self.stem = nn.Sequential(nn.Conv2d(3, 8, 3, 2, 1), nn.ReLU6())
            self.b1, self.b2, self.b3 = block(8, 8, 1), block(8, 16, 2), block(16, 16, 1)
            self.head = nn.Linear(16, 10)

        def forward(self, x):
            x = self.stem(x)
            x = x + self.b1(x)
            x = self.b2(x)
            x = x + self.b3(x)
            # flatten with a shape computed in the graph: the pattern that needs simplification
            x = x.mean((2, 3)).reshape(x.shape[0], -1)
            return self.head(x)

    torch.manual_seed(0)
    net = Net().eval()
    with torch.no_grad():  # non-trivial batch-norm statistics
        for m in net.modules():
            if isinstance(m, nn.BatchNorm2d):
                m.running_mean.uniform_(-0.1, 0.1)
                m.running_var.uniform_(0.5, 1.5)
    return net


@pytest.fixture(scope="session")
def torch_onnx(models_dir) -> Path:
    """The MobileNet-like torch net exported to ONNX with a dynamic batch dimension."""
    import torch

    path = models_dir / "mobilenet_like_dynamic.onnx"
    torch.onnx.export(
        torch_mobilenet_like(),
        (torch.randn(1, 3, 64, 64),),
        str(path),
        input_names=["image"],
        output_names=["logits"],
        dynamic_axes={"image": {0: "batch"}},
        opset_version=17,
        dynamo=False,
    )
    return path


@pytest.fixture(scope="session")
def torch_pt2(models_dir) -> Path:
    import torch

    path = models_dir / "mobilenet_like.pt2"
    ep = torch.export.export(torch_mobilenet_like(), (torch.randn(1, 3, 64, 64),))
    torch.export.save(ep, str(path))
    return path


def keras_cnn():
    import tensorflow as tf

    tf.random.set_seed(0)
    return tf.keras.Sequential(
        [
            tf.keras.Input((32, 32, 3), batch_size=1, name="image"),
            tf.keras.layers.Conv2D(8, 3, padding="same", activation="relu6"),
            tf.keras.layers.DepthwiseConv2D(3, strides=2, padding="same"),
            tf.keras.layers.Conv2D(16, 1, activation="relu"),
            tf.keras.layers.MaxPooling2D(2),
            tf.keras.layers.GlobalAveragePooling2D(),
            tf.keras.layers.Dense(10),
            tf.keras.layers.Softmax(),
        ]
    )


@pytest.fixture(scope="session")
def keras_model():
    """One Keras CNN shared by the TFLite, .pb and SavedModel fixtures, and their TensorFlow reference."""
    return keras_cnn()


@pytest.fixture(scope="session")
def tflite_model(models_dir, keras_model) -> Path:
    import tensorflow as tf

    path = models_dir / "cnn.tflite"
    path.write_bytes(tf.lite.TFLiteConverter.from_keras_model(keras_model).convert())
    return path


@pytest.fixture(scope="session")
def tflite_custom_op(models_dir) -> Path:
    """A TFLite model holding a custom operator (a TF op with no TFLite builtin)."""
    import tensorflow as tf

    @tf.function(input_signature=[tf.TensorSpec([1, 4], tf.float32)])
    def f(x):
        return tf.math.bessel_i1e(x) + 1.0

    conv = tf.lite.TFLiteConverter.from_concrete_functions([f.get_concrete_function()], f)
    conv.allow_custom_ops = True
    path = models_dir / "custom.tflite"
    path.write_bytes(conv.convert())
    return path


def frozen_graph(keras_model, batch=None):
    """A frozen GraphDef of a Keras model with a Placeholder input named 'input'."""
    import tensorflow as tf
    from tensorflow.python.framework.convert_to_constants import convert_variables_to_constants_v2

    shape = [batch, *keras_model.input_shape[1:]]

    @tf.function(input_signature=[tf.TensorSpec(shape, tf.float32, name="input")])
    def f(x):
        return tf.identity(keras_model(x), name="probs")

    return convert_variables_to_constants_v2(f.get_concrete_function()).graph.as_graph_def()


@pytest.fixture(scope="session")
def pb_model(models_dir, keras_model) -> Path:
    """A frozen graph with a dynamic batch dimension (as TF exports them): needs --input."""
    path = models_dir / "mobilenet.pb"
    path.write_bytes(frozen_graph(keras_model, batch=None).SerializeToString())
    return path


@pytest.fixture(scope="session")
def saved_model(models_dir, keras_model) -> Path:
    import tensorflow as tf

    model = keras_model
    path = models_dir / "saved"

    class Wrapper(tf.Module):
        def __init__(self):
            super().__init__()
            self.model = model

        @tf.function(input_signature=[tf.TensorSpec([1, 32, 32, 3], tf.float32, name="image")])
        def serve(self, image):
            return {"probs": self.model(image)}

    w = Wrapper()
    tf.saved_model.save(w, str(path), signatures={"serving_default": w.serve})
    return path


def dynamic_pad_model():
    """Pad amounts computed from the input's shape (as torch exports 'same' padding).

    TVM's importer rejects this ("Dynamic pads are not supported yet") until the shape is
    fixed and the pad computation folded to a constant.
    """
    from onnx import TensorProto, helper, numpy_helper

    def c(name, value):
        return numpy_helper.from_array(np.array(value, dtype=np.int64), name)

    nodes = [
        helper.make_node("Shape", ["x"], ["s"]),
        helper.make_node("Gather", ["s", "hw_idx"], ["hw"], axis=0),
        helper.make_node("Div", ["hw", "sixteen"], ["p"]),
        helper.make_node("Concat", ["zeros2", "p", "zeros2", "p"], ["pads"], axis=0),
        helper.make_node("Pad", ["x", "pads"], ["y"], mode="constant"),
        helper.make_node("Relu", ["y"], ["out"]),
    ]
    return onnx_model(
        nodes,
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, 3, "h", "w"])],
        [helper.make_tensor_value_info("out", TensorProto.FLOAT, [1, 3, "ho", "wo"])],
        [c("hw_idx", [2, 3]), c("sixteen", 16), c("zeros2", [0, 0])],
    )
