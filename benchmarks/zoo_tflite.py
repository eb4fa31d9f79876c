"""The zoo's TFLite models: the Keras applications (converted, full-integer too) and the heads built
with TensorFlow here, with random weights."""

from __future__ import annotations

from pathlib import Path

import numpy as np

# the keras.applications models and the class each is built from
KERAS = {"keras_mobilenet_v2": "MobileNetV2", "keras_mobilenet_v3_small": "MobileNetV3Small"}


def keras_tflite(name: str, work: Path) -> Path:
    import tensorflow as tf

    tf.keras.utils.set_random_seed(0)
    app = getattr(tf.keras.applications, KERAS.get(name, "MobileNetV2"))
    # a fixed batch of 1, as a phone build needs (keras.applications alone leaves it dynamic); logits, not
    # softmax, and He-initialised weights: with keras' own initialisation every output is 0.001 for any
    # input, and a check against the reference would prove nothing
    model = app(
        input_tensor=tf.keras.Input((224, 224, 3), batch_size=1),
        weights=None,
        include_top=True,
        classifier_activation=None,
    )
    _randomise_keras(model, np.random.default_rng(0))
    converter = tf.lite.TFLiteConverter.from_keras_model(model)
    if name.endswith("_int8"):  # full-integer: int8 weights and activations, float input/output
        rng = np.random.default_rng(0)
        converter.optimizations = [tf.lite.Optimize.DEFAULT]
        converter.representative_dataset = lambda: ([rng.random((1, 224, 224, 3), np.float32)] for _ in range(8))
        converter.target_spec.supported_ops = [tf.lite.OpsSet.TFLITE_BUILTINS_INT8]
    path = work / f"{name}.tflite"
    path.write_bytes(converter.convert())
    return path


def _randomise_keras(model, rng) -> None:
    """He-normal kernels, small random biases, random batch-norm statistics (as zoo_nets does),
    PReLU slopes in [0, 0.5)."""
    import tensorflow as tf

    for layer in model.layers:
        weights = layer.get_weights()
        if not weights:
            continue
        if isinstance(layer, tf.keras.layers.PReLU):
            new = [rng.uniform(0.0, 0.5, w.shape) for w in weights]
        elif isinstance(layer, tf.keras.layers.BatchNormalization):
            n = weights[0].shape[0]
            new = (
                [0.5 + rng.random(n), 0.1 * rng.standard_normal(n), 0.1 * rng.standard_normal(n), 0.5 + rng.random(n)][
                    -len(weights) :
                ]
                if len(weights) == 4
                else weights
            )
        else:
            new = []
            for w in weights:
                if w.ndim >= 2:
                    fan_in = int(
                        np.prod(w.shape[:2] if isinstance(layer, tf.keras.layers.DepthwiseConv2D) else w.shape[:-1])
                    )
                    new.append(rng.standard_normal(w.shape) * np.sqrt(2.0 / fan_in))
                else:
                    new.append(0.1 * rng.standard_normal(w.shape))
        layer.set_weights([np.asarray(w, np.float32) for w in new])


def det_head(work: Path) -> Path:
    """A TFLite detector/segmenter head: PReLU backbone, Conv2DTranspose and bilinear upsampling."""
    import tensorflow as tf

    tf.keras.utils.set_random_seed(0)
    L = tf.keras.layers
    inp = tf.keras.Input((128, 128, 3), batch_size=1)
    x = L.PReLU(shared_axes=[1, 2])(L.Conv2D(16, 3, 2, padding="same")(inp))
    x = L.DepthwiseConv2D(5, 2, padding="same")(x)
    skip = x = L.PReLU(shared_axes=[1, 2])(L.Conv2D(32, 1)(x))
    x = L.PReLU(shared_axes=[1, 2])(L.Conv2D(64, 3, 2, padding="same")(x))
    x = L.Conv2DTranspose(32, 2, 2)(x)
    x = L.Concatenate()([x, skip])
    x = L.UpSampling2D(4, interpolation="bilinear")(L.Conv2D(4, 1)(x))
    model = tf.keras.Model(inp, x)
    _randomise_keras(model, np.random.default_rng(0))
    path = work / "det_head_tflite.tflite"
    path.write_bytes(tf.lite.TFLiteConverter.from_keras_model(model).convert())
    return path


def tflite_operators(model: bytes) -> list[tuple[str, list[int], list[int]]]:
    """(builtin name, input tensors, output tensors) of each operator of subgraph 0."""
    from ai_edge_litert import schema_py_generated as fb

    names = {v: k for k, v in vars(fb.BuiltinOperator).items() if not k.startswith("_")}
    m = fb.ModelT.InitFromObj(fb.Model.GetRootAsModel(model, 0))
    codes = [names[max(c.builtinCode, c.deprecatedBuiltinCode)] for c in m.operatorCodes]
    return [(codes[op.opcodeIndex], list(op.inputs), list(op.outputs)) for op in m.subgraphs[0].operators]


def tflite_computed_slice(work: Path) -> Path:
    """Issue 47's computed operands: converted with a dynamic batch, the model reshapes its features
    [batch, 64, 16] into tokens [batch, -1, 32] (a count the converter cannot tell), splits them at
    tf.shape(tokens)[1] // 2 (SHAPE -> STRIDED_SLICE -> FLOOR_DIV -> PACK -> the bounds of two
    STRIDED_SLICEs), gates one half by the other (a GLU), adds a channel axis with EXPAND_DIMS (axis
    -1) and convolves. TVM's importer reads those bounds and shapes as constants: tvmgen folds them."""
    import tensorflow as tf

    rng = np.random.default_rng(5)
    w1 = tf.constant((rng.standard_normal((8, 16)) * 0.35).astype(np.float32))
    w2 = tf.constant((rng.standard_normal((3, 3, 1, 4)) * 0.5).astype(np.float32))

    @tf.function(input_signature=[tf.TensorSpec([None, 64, 8], tf.float32, name="x")])
    def f(x):
        h = tf.matmul(x, w1)  # [batch, 64, 16]
        tokens = tf.reshape(h, tf.stack([tf.shape(h)[0], -1, 32]))  # [batch, 32, 32]
        n = tf.shape(tokens)[1] // 2
        glu = tokens[:, :n] * tf.sigmoid(tokens[:, n:])  # [batch, 16, 32]
        return tf.nn.relu(tf.nn.conv2d(tf.expand_dims(glu, -1), w2, 1, "SAME"))  # [batch, 16, 32, 4]

    model = tf.lite.TFLiteConverter.from_concrete_functions([f.get_concrete_function()], f).convert()
    ops = tflite_operators(model)
    computed = {t: name for name, _, outs in ops for t in outs}
    slices = [ins for name, ins, _ in ops if name == "STRIDED_SLICE" and computed.get(ins[0]) != "SHAPE"]
    assert any(computed.get(t) == "PACK" for ins in slices for t in ins[1:3]), "no computed STRIDED_SLICE bounds"
    assert {"SHAPE", "EXPAND_DIMS"} <= {name for name, _, _ in ops}, "expected SHAPE and EXPAND_DIMS"
    path = work / "tflite_computed_slice.tflite"
    path.write_bytes(model)
    return path


def tflite_dynamic_batch(work: Path) -> Path:
    """An audio classifier converted from Keras with its batch left dynamic (shape_signature -1, stored
    shape 1): 16000 samples, two strided Conv1D (EXPAND_DIMS, CONV_2D, RESHAPE), global pooling, a
    classifier; the converter computes the first reshape's target from SHAPE."""
    import tensorflow as tf

    tf.keras.utils.set_random_seed(0)
    L = tf.keras.layers
    inp = tf.keras.Input((16000,), name="samples")
    x = L.Reshape((16000, 1))(inp)
    x = L.Conv1D(8, 9, strides=4, activation="relu")(x)
    x = L.Conv1D(16, 9, strides=4, activation="relu")(x)
    x = L.Dense(5)(L.GlobalAveragePooling1D()(x))
    model = tf.keras.Model(inp, x)
    _randomise_keras(model, np.random.default_rng(0))
    tflite = tf.lite.TFLiteConverter.from_keras_model(model).convert()
    from ai_edge_litert import schema_py_generated as fb

    sub = fb.Model.GetRootAsModel(tflite, 0).Subgraphs(0)
    signature = sub.Tensors(int(sub.InputsAsNumpy()[0])).ShapeSignatureAsNumpy()
    assert list(signature) == [-1, 16000], f"expected a dynamic batch, got {signature}"
    path = work / "tflite_dynamic_batch.tflite"
    path.write_bytes(tflite)
    return path


def selfie_seg_fp16(work: Path) -> Path:
    """MediaPipe's selfie segmenter in small: an encoder-decoder (Conv2D, DepthwiseConv2D, PReLU, skip
    additions, Conv2DTranspose, sigmoid) converted with fp16 weights, so every weight and bias is an fp16
    constant run through DEQUANTIZE; then, as MediaPipe's models have them, the first and the last
    transposed convolutions become its custom Convolution2DTransposeBias (inputs: data, the DEQUANTIZE'd
    OHWI weights and bias; options: padding, stride_w, stride_h as int32), the middle one stays the
    builtin TRANSPOSE_CONV. LiteRT runs the custom operator (XNNPACK)."""
    import struct

    import flatbuffers
    import tensorflow as tf
    from ai_edge_litert import schema_py_generated as fb

    tf.keras.utils.set_random_seed(0)
    L = tf.keras.layers
    # PReLU, not fusable: the transposed convolutions keep no fused activation (the custom operator has none)
    prelu = lambda x: L.PReLU(shared_axes=[1, 2])(x)  # noqa: E731
    inp = tf.keras.Input((128, 128, 3), batch_size=1)
    e1 = prelu(L.Conv2D(16, 3, 2, padding="same")(inp))  # 64 x 64 x 16
    e2 = prelu(L.Conv2D(32, 1)(L.DepthwiseConv2D(3, 2, padding="same")(e1)))  # 32 x 32 x 32
    e3 = prelu(L.Conv2D(64, 1)(L.DepthwiseConv2D(3, 2, padding="same")(e2)))  # 16 x 16 x 64
    d2 = prelu(L.Add()([L.Conv2DTranspose(32, 4, 2, padding="same")(e3), e2]))  # custom
    d1 = prelu(L.Add()([L.Conv2DTranspose(16, 2, 2, padding="valid")(d2), e1]))  # builtin
    out = L.Activation("sigmoid")(L.Conv2DTranspose(1, 2, 2, padding="valid")(d1))  # custom
    model = tf.keras.Model(inp, out)
    _randomise_keras(model, np.random.default_rng(0))
    converter = tf.lite.TFLiteConverter.from_keras_model(model)
    converter.optimizations = [tf.lite.Optimize.DEFAULT]
    converter.target_spec.supported_types = [tf.float16]
    m = fb.ModelT.InitFromObj(fb.Model.GetRootAsModel(converter.convert(), 0))
    code = fb.OperatorCodeT()
    code.builtinCode = code.deprecatedBuiltinCode = fb.BuiltinOperator.CUSTOM
    code.customCode, code.version = "Convolution2DTransposeBias", 1
    m.operatorCodes.append(code)
    sub = m.subgraphs[0]
    transposed = [
        op for op in sub.operators if m.operatorCodes[op.opcodeIndex].builtinCode == fb.BuiltinOperator.TRANSPOSE_CONV
    ]
    assert len(transposed) == 3, "expected three TRANSPOSE_CONV operators"
    for op in (transposed[0], transposed[2]):
        _, weights, data, bias = op.inputs
        opts = op.builtinOptions
        assert bias >= 0 and opts.fusedActivationFunction == fb.ActivationFunctionType.NONE
        op.opcodeIndex, op.inputs = len(m.operatorCodes) - 1, [data, weights, bias]
        padding = 1 if opts.padding == fb.Padding.SAME else 2  # MediaPipe's TfLitePadding: 1 SAME, 2 VALID
        op.builtinOptionsType, op.builtinOptions = 0, None
        op.customOptions, op.customOptionsFormat = list(struct.pack("<iii", padding, opts.strideW, opts.strideH)), 0
    b = flatbuffers.Builder(1 << 20)
    b.Finish(m.Pack(b), file_identifier=b"TFL3")
    path = work / "selfie_seg_fp16.tflite"
    path.write_bytes(bytes(b.Output()))
    return path
