"""The zoo's streaming keyword spotter, built with TensorFlow (the zoo and the tests both build it here).

Each run takes one [1, 3, 40] slice of log-mel features (3 frames of 40 bins, int8) and returns the
keyword's probability (uint8). A ``tf.Variable`` ring buffer holds the last 24 frames: each call
appends the new slice and drops the oldest 3 (``tf.concat`` then a slice: CONCATENATION and
STRIDED_SLICE), assigns the buffer back, then splits it unevenly into the older 9 frames and the
recent 15 (``tf.split``: SPLIT_V). The recent frames go through a 1-D convolution (CONV_2D) and a dense
layer, the older ones through a time average (MEAN) and a dense layer; both are joined
(CONCATENATION) into a last dense layer and a sigmoid (LOGISTIC).

Converted full-integer (int8 in, uint8 out, a seeded representative dataset) with the resource
variables kept (``experimental_enable_resource_variables``: VAR_HANDLE, READ_VARIABLE,
ASSIGN_VARIABLE, and a CALL_ONCE init subgraph that assigns the initial value) and quantised
(``_experimental_variable_quantization``: the ring buffer is int8, as on-device spotters keep it).
"""

from __future__ import annotations

import os
from pathlib import Path

import numpy as np

FRAMES, BINS, SLICE = 24, 40, 3  # the buffer's frames, the features' bins, the frames of one run
OLDER = 9  # the split: the older frames (averaged) and the recent FRAMES - OLDER (convolved)
NEEDED = {"VAR_HANDLE", "READ_VARIABLE", "ASSIGN_VARIABLE", "CALL_ONCE", "STRIDED_SLICE", "SPLIT_V"}


def streaming_kws_int8(path: Path, initial: np.ndarray | float = 0.0, seed: int = 0) -> Path:
    """Write the spotter to ``path``. ``initial``: the ring buffer's initial value (a scalar, or an array
    of shape [1, FRAMES, BINS]), in the features' float scale."""
    os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")
    import tensorflow as tf

    rng = np.random.default_rng(seed)

    def weights(*shape, fan_in):
        return tf.constant((rng.standard_normal(shape) * np.sqrt(2.0 / fan_in)).astype(np.float32))

    recent = FRAMES - OLDER
    conv_w, conv_b = weights(3, BINS, 48, fan_in=3 * BINS), weights(48, fan_in=48)
    recent_w = weights((recent - 2) * 48, 64, fan_in=(recent - 2) * 48)
    older_w = weights(BINS, 16, fan_in=BINS)
    out_w = weights(64 + 16, 1, fan_in=64 + 16)
    start = np.broadcast_to(np.asarray(initial, np.float32), (1, FRAMES, BINS)).copy()

    class Spotter(tf.Module):
        def __init__(self):
            super().__init__()
            self.ring = tf.Variable(start, trainable=False, name="ring")

        @tf.function(input_signature=[tf.TensorSpec([1, SLICE, BINS], tf.float32, name="features")])
        def __call__(self, features):
            frames = tf.concat([self.ring, features], axis=1)[:, SLICE:, :]
            self.ring.assign(frames)
            older, recent_frames = tf.split(frames, [OLDER, recent], axis=1)
            h = tf.nn.relu(tf.nn.conv1d(recent_frames, conv_w, 1, "VALID") + conv_b)
            h = tf.nn.relu(tf.matmul(tf.reshape(h, [1, -1]), recent_w))
            g = tf.nn.relu(tf.matmul(tf.reduce_mean(older, axis=1), older_w))
            return tf.sigmoid(tf.matmul(tf.concat([h, g], axis=1), out_w))

    spotter = Spotter()
    converter = tf.lite.TFLiteConverter.from_concrete_functions([spotter.__call__.get_concrete_function()], spotter)
    converter.experimental_enable_resource_variables = True
    converter._experimental_variable_quantization = True  # the ring buffer in int8, not float
    converter.optimizations = [tf.lite.Optimize.DEFAULT]
    data = np.random.default_rng(seed + 1)
    converter.representative_dataset = lambda: (
        [data.uniform(-1, 1, (1, SLICE, BINS)).astype(np.float32)] for _ in range(64)
    )
    converter.target_spec.supported_ops = [tf.lite.OpsSet.TFLITE_BUILTINS_INT8]
    converter.inference_input_type = tf.int8
    converter.inference_output_type = tf.uint8
    model = converter.convert()
    present = set(operator_names(model))
    assert present >= NEEDED, f"the converter left out {sorted(NEEDED - present)}"
    path.write_bytes(model)
    return path


def operator_names(model: bytes) -> list[str]:
    """The builtin names of every operator of every subgraph."""
    from ai_edge_litert import schema_py_generated as fb

    names = {v: k for k, v in vars(fb.BuiltinOperator).items() if not k.startswith("_")}
    m = fb.Model.GetRootAsModel(model, 0)
    codes = []
    for i in range(m.OperatorCodesLength()):
        c = m.OperatorCodes(i)
        codes.append(names.get(max(c.BuiltinCode(), c.DeprecatedBuiltinCode()), "?"))
    return [
        codes[m.Subgraphs(s).Operators(i).OpcodeIndex()]
        for s in range(m.SubgraphsLength())
        for i in range(m.Subgraphs(s).OperatorsLength())
    ]
