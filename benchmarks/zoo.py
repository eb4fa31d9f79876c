#!/usr/bin/env python3
"""The project's model zoo: real mobile architectures, built here with random weights, compiled,
checked against their reference runtime and timed against it.

Nothing is downloaded: the PyTorch classifiers are defined in zoo_nets.py (exported to ONNX),
keras.applications builds the Keras ones (weights=None, converted to TFLite), the heads and the
audio models are defined below. Each model is
imported, compiled for every target asked for, checked on seeded inputs against its reference
(onnxruntime for ONNX, LiteRT for TFLite) and, on host/cpu, timed against that reference at one
thread (medians, round robin, in one child process per model).

Targets: host (host/cpu; timed), aarch64 (linux-aarch64/cpu run by tvmgen-run under qemu-aarch64;
checked, not timed: emulated), opencl (host/opencl run by tvmgen-run on the machine's OpenCL
driver, PoCL here; checked), vulkan (host/vulkan run by tvmgen-run with libtvmgen_vulkan on the
machine's Vulkan driver, Mesa's lavapipe here; checked).

    .venv/bin/python benchmarks/zoo.py                          # every model, host (~15 min on 2 cores)
    .venv/bin/python benchmarks/zoo.py --targets host,aarch64,opencl
    .venv/bin/python benchmarks/zoo.py --targets host,vulkan
    .venv/bin/python benchmarks/zoo.py --models seg_head,audio_rnn --json zoo.json
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent))
import benchlib
import zoo_state_pairs
from zoo_nets import NAMES as TORCH_NETS

KERAS = {"keras_mobilenet_v2": "MobileNetV2", "keras_mobilenet_v3_small": "MobileNetV3Small"}
OTHERS = (
    "keras_mobilenet_v2_int8",
    "seg_head",
    "det_head_tflite",
    "audio_rnn",
    "text_recognizer",
    "byte_cnn",
    "mobilevit_xxs",
    "text_encoder",
    "vad_if",
    "vad_scalar",
    "selfie_seg_fp16",
    "tflite_computed_slice",
    "tflite_dynamic_batch",
    "gru_scorer_opset9",
    "gru_scorer_opset11",
    "stream_gru",
    "streaming_kws_int8",
)
MODELS = (*TORCH_NETS, *KERAS, *OTHERS)
TARGETS = {
    "host": ("host", "cpu"),
    "aarch64": ("linux-aarch64", "cpu"),
    "opencl": ("host", "opencl"),
    "vulkan": ("host", "vulkan"),
}
# what each model adds to the coverage (the table's last column)
WHAT = {
    "mobilenet_v3_small": "hard-swish, squeeze-excitation",
    "efficientnet_b0": "SiLU, squeeze-excitation",
    "shufflenet_v2_x1_0": "channel shuffle, split",
    "squeezenet1_1": "concat, ceil-mode pooling",
    "keras_mobilenet_v2_int8": "full-integer TFLite",
    "seg_head": "ConvTranspose, Resize, PRelu, SE",
    "det_head_tflite": "TRANSPOSE_CONV, RESIZE_BILINEAR, PRELU",
    "audio_rnn": "Conv1d, GRU, LSTM",
    "text_recognizer": "GELU (Erf) conv epilogues, LayerNorm, attention, 1x7 conv",
    "byte_cnn": "Conv1d, [C,L,1] and [C,1,L] Conv, Max(x,0)",
    "mobilevit_xxs": "ViT hybrid: patches, attention, 4000 classes",
    "text_encoder": "embeddings, attention with a padding mask",
    "vad_if": "LSTM in If, --const sr=16000",
    "vad_scalar": "scalar input into If and arithmetic, scalar output",
    "selfie_seg_fp16": "fp16 weights (DEQUANTIZE), MediaPipe Convolution2DTransposeBias",
    "tflite_computed_slice": "STRIDED_SLICE bounds from SHAPE arithmetic (folded), EXPAND_DIMS axis -1",
    "tflite_dynamic_batch": "batch -1 in shape_signature (taken at 1), Keras Conv1D over 16000 samples",
    "gru_scorer_opset9": "opset 9: attribute Slice on a GRU state input, dynamic batch and frames",
    "gru_scorer_opset11": "opset 11: GRU state from the batch size (Shape, ConstantOfShape), 0-d output",
    "stream_gru": "state held by the runtime (--state h0=hn, frames_in=frames_out), checked over 20 steps",
    "streaming_kws_int8": "TFLite resource variables (int8 ring buffer) as state, quantized STRIDED_SLICE, SPLIT_V",
}
# `tvmgen compile` flags a model needs: --const binds an input (the reference gets its value), --input fixes
# the dynamic sizes an exporter left
FLAGS = {
    "vad_if": ("--const", "sr=16000"),
    "gru_scorer_opset9": ("--input", "x:1x40x30", "--input", "h0:4x1x64"),
    "gru_scorer_opset11": ("--input", "x:1x50x40"),
    "stream_gru": zoo_state_pairs.FLAGS,
}
# Models checked on set values of some inputs (one check per set; the rest seeded random): an If
# on a scalar must be checked down each branch.
INPUT_VALUES = {"vad_scalar": ({"sr": 16000}, {"sr": 8000})}


# =========================================================================== models


def _onnx_from_torch(module, example, path: Path) -> Path:
    import torch

    with torch.no_grad():
        torch.onnx.export(module.eval(), example, str(path), opset_version=17, dynamo=False)
    return path


def build(name: str, work: Path) -> tuple[Path, list[str]]:
    """The model file, and extra `tvmgen compile` flags it needs."""
    import torch

    torch.manual_seed(0)
    if name in TORCH_NETS:
        import zoo_nets

        return _onnx_from_torch(zoo_nets.build(name), torch.randn(1, 3, 224, 224), work / f"{name}.onnx"), []
    if name in KERAS or name == "keras_mobilenet_v2_int8":
        return _keras_tflite(name, work), []
    if name == "seg_head":
        return _onnx_from_torch(_SegHead(), torch.randn(1, 3, 128, 128), work / "seg_head.onnx"), []
    if name == "det_head_tflite":
        return _det_head(work), []
    if name == "selfie_seg_fp16":
        return _selfie_seg_fp16(work), []
    if name == "tflite_computed_slice":
        return _tflite_computed_slice(work), []
    if name == "tflite_dynamic_batch":
        return _tflite_dynamic_batch(work), []
    if name == "text_recognizer":
        return _onnx_from_torch(_zoo_module(2), torch.randn(1, 3, 32, 128), work / "text_recognizer.onnx"), []
    if name == "byte_cnn":  # issue 37: 512 bytes
        return _onnx_from_torch(_zoo_module(3), torch.randint(0, 256, (1, 512)), work / "byte_cnn.onnx"), []
    if name == "mobilevit_xxs":
        return _onnx_from_torch(_zoo_module(4), torch.randn(1, 3, 64, 64), work / "mobilevit_xxs.onnx"), []
    if name == "text_encoder":
        return _onnx_from_torch(_zoo_module(5), torch.randint(0, 1000, (1, 32)), work / "text_encoder.onnx"), []
    if name == "audio_rnn":
        return _onnx_from_torch(_AudioRnn(), torch.randn(1, 40, 50), work / "audio_rnn.onnx"), []
    if name == "vad_if":
        return _vad_if(work), build_flags(name)
    if name == "vad_scalar":
        return _vad_if(work, scalar=True), []
    if name == "stream_gru":
        return zoo_state_pairs.stream_gru(work), build_flags(name)
    if name == "streaming_kws_int8":
        import zoo_streaming

        return zoo_streaming.streaming_kws_int8(work / "streaming_kws_int8.tflite"), []
    if name in ("gru_scorer_opset9", "gru_scorer_opset11"):
        return _gru_scorer(work, int(name.rsplit("opset", 1)[1])), build_flags(name)
    raise SystemExit(f"unknown model {name}")


def _keras_tflite(name: str, work: Path) -> Path:
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


def _torch_modules():
    import torch
    from torch import nn

    class SqueezeExcite(nn.Module):
        def __init__(self, c):
            super().__init__()
            self.fc1, self.fc2 = nn.Conv2d(c, c // 4, 1), nn.Conv2d(c // 4, c, 1)

        def forward(self, x):
            return x * torch.sigmoid(self.fc2(torch.relu(self.fc1(x.mean((2, 3), keepdim=True)))))

    class SegHead(nn.Module):
        """An encoder-decoder segmenter: strided convs with PReLU / hard-swish and SE, then
        transposed convolutions and a bilinear resize back to the input size."""

        def __init__(self):
            super().__init__()
            self.enc = nn.Sequential(
                nn.Conv2d(3, 16, 3, 2, 1),
                nn.PReLU(16),
                nn.Conv2d(16, 16, 3, 1, 1, groups=16),
                nn.Conv2d(16, 32, 1),
                nn.Hardswish(),
                nn.Conv2d(32, 64, 3, 2, 1),
                nn.PReLU(64),
                SqueezeExcite(64),
                nn.Conv2d(64, 96, 3, 2, 1),
                nn.Hardswish(),
            )
            self.dec = nn.Sequential(
                nn.ConvTranspose2d(96, 48, 4, 2, 1),
                nn.PReLU(48),
                nn.ConvTranspose2d(48, 24, 2, 2),
                nn.ReLU(),
                nn.Conv2d(24, 1, 1),
            )

        def forward(self, x):
            y = self.dec(self.enc(x))
            return torch.sigmoid(nn.functional.interpolate(y, size=x.shape[2:], mode="bilinear", align_corners=False))

    class AudioRnn(nn.Module):
        """A keyword-spotting shape: a 1-D conv frontend over 40 mel bands, a GRU, an LSTM, a classifier."""

        def __init__(self):
            super().__init__()
            self.conv = nn.Conv1d(40, 64, 3, padding=1)
            self.gru = nn.GRU(64, 64, batch_first=True)
            self.lstm = nn.LSTM(64, 48, batch_first=True, bidirectional=True)
            self.out = nn.Linear(96, 12)

        def forward(self, x):  # x: [batch, mel, frames]
            y = torch.relu(self.conv(x)).transpose(1, 2)
            y = self.lstm(self.gru(y)[0])[0]
            return self.out(y[:, -1])

    class Attention(nn.Module):
        """Multi-head self-attention written out (MatMul, Softmax), as text recognizers export it."""

        def __init__(self, dim, heads):
            super().__init__()
            self.heads, self.qkv, self.proj = heads, nn.Linear(dim, 3 * dim), nn.Linear(dim, dim)

        def forward(self, x, bias=None):  # [batch, tokens, dim]; bias: added to the scores (a mask)
            b, n, d = x.shape
            q, k, v = self.qkv(x).reshape(b, n, 3, self.heads, d // self.heads).permute(2, 0, 3, 1, 4)
            scores = q @ k.transpose(-2, -1) * (d // self.heads) ** -0.5
            a = torch.softmax(scores if bias is None else scores + bias, dim=-1)
            return self.proj((a @ v).transpose(1, 2).reshape(b, n, d))

    class Block(nn.Module):
        """A pre-norm transformer block: LayerNorm, attention, LayerNorm, GELU MLP (Erf), residuals."""

        def __init__(self, dim, heads, hidden):
            super().__init__()
            self.norm1, self.attn, self.norm2 = nn.LayerNorm(dim), Attention(dim, heads), nn.LayerNorm(dim)
            self.mlp = nn.Sequential(nn.Linear(dim, hidden), nn.GELU(), nn.Linear(hidden, dim))

        def forward(self, x, bias=None):
            x = x + self.attn(self.norm1(x), bias)
            return x + self.mlp(self.norm2(x))

    class TextRecognizer(nn.Module):
        """An SVTR-style text recognizer (PP-OCR's shape): convolutions with a GELU epilogue (Erf), a
        2 x 2 patch merge and a 1 x 7 convolution, transformer blocks (LayerNorm, attention, GELU
        MLP), a large classifier per column."""

        def __init__(self, dim=64, classes=1000):
            super().__init__()
            self.stem = nn.Sequential(nn.Conv2d(3, 32, 3, 2, 1), nn.GELU(), nn.Conv2d(32, dim, 2, 2), nn.GELU())
            self.local = nn.Sequential(nn.Conv2d(dim, dim, (1, 7), 1, (0, 3)), nn.GELU())
            self.norm1, self.attn = nn.LayerNorm(dim), Attention(dim, 4)
            self.norm2 = nn.LayerNorm(dim)
            self.mlp = nn.Sequential(nn.Linear(dim, 2 * dim), nn.GELU(), nn.Linear(2 * dim, dim))
            self.head = nn.Linear(dim, classes)

        def forward(self, x):  # [1, 3, 32, 128] -> [1, 32 columns, classes]
            y = self.local(self.stem(x))
            t = y.flatten(2).transpose(1, 2)  # [1, 8 x 32 tokens, dim]
            t = t + self.attn(self.norm1(t))
            t = t + self.mlp(self.norm2(t))
            cols = t.reshape(1, 8, 32, -1).mean(1)
            return torch.softmax(self.head(cols), dim=-1)

    class ByteCnn(nn.Module):
        """A byte-level content classifier (issue 37's shape): the bytes embedded, three 1-D
        convolutions of width 5 written the three ways exporters write them (Conv1d; a 2-D
        convolution over [1, C, L, 1], as the issue's [512, 256, 5, 1]; one over [1, C, 1, L]),
        global max pooling, a ReLU exported as ONNX Max(x, 0) (which TVM's importer writes as a
        reduction over a stack), a classifier."""

        def __init__(self, dim=64, width=128, classes=32):
            super().__init__()
            self.embed = nn.Embedding(256, dim)
            self.conv1d = nn.Conv1d(dim, width, 5, padding=2)
            self.conv_l1 = nn.Conv2d(width, width, (5, 1), padding=(2, 0))
            self.conv_1l = nn.Conv2d(width, width, (1, 5), padding=(0, 2))
            self.fc, self.out = nn.Linear(width, 64), nn.Linear(64, classes)

        def forward(self, ids):  # [1, L] bytes
            x = torch.relu(self.conv1d(self.embed(ids).transpose(1, 2)))  # [1, C, L]
            x = torch.relu(self.conv_l1(x.unsqueeze(3))).squeeze(3)
            x = torch.relu(self.conv_1l(x.unsqueeze(2))).squeeze(2)
            return self.out(torch.maximum(self.fc(x.amax(2)), torch.zeros(())))

    class MobileVitBlock(nn.Module):
        """MobileViT's block: a local 3x3 and a 1x1 convolution, the feature map unfolded into 2 x 2
        patches (one token sequence per position in the patch), transformer blocks, folded back,
        projected and fused with the block's input by a 3x3 convolution."""

        def __init__(self, c, dim, heads, depth, patch=2):
            super().__init__()
            self.patch = patch
            self.local = nn.Sequential(nn.Conv2d(c, c, 3, 1, 1), nn.SiLU(), nn.Conv2d(c, dim, 1))
            self.blocks = nn.ModuleList(Block(dim, heads, 2 * dim) for _ in range(depth))
            self.norm = nn.LayerNorm(dim)
            self.proj = nn.Sequential(nn.Conv2d(dim, c, 1), nn.SiLU())
            self.fuse = nn.Sequential(nn.Conv2d(2 * c, c, 3, 1, 1), nn.SiLU())

        def forward(self, x):
            b, _, h, w = x.shape
            p, y = self.patch, self.local(x)
            d = y.shape[1]
            t = y.reshape(b, d, h // p, p, w // p, p).permute(0, 3, 5, 2, 4, 1).reshape(b * p * p, -1, d)
            for block in self.blocks:
                t = block(t)
            t = self.norm(t).reshape(b, p, p, h // p, w // p, d).permute(0, 5, 3, 1, 4, 2).reshape(b, d, h, w)
            return self.fuse(torch.cat([x, self.proj(t)], 1))

    class MobileVit(nn.Module):
        """A small MobileViT-style hybrid (XXS widths): a stride-2 stem, an inverted residual, a
        MobileViT block on 16 x 16, a 1x1 expansion, global pooling and a large classifier."""

        def __init__(self, classes=4000):
            super().__init__()
            self.stem = nn.Sequential(nn.Conv2d(3, 16, 3, 2, 1), nn.SiLU())
            self.mv2 = nn.Sequential(
                nn.Conv2d(16, 32, 1), nn.SiLU(), nn.Conv2d(32, 32, 3, 2, 1, groups=32), nn.SiLU(), nn.Conv2d(32, 24, 1)
            )
            self.vit = MobileVitBlock(24, 48, 4, 2)
            self.head = nn.Sequential(nn.Conv2d(24, 96, 1), nn.SiLU())
            self.classifier = nn.Linear(96, classes)

        def forward(self, x):  # [1, 3, 64, 64]
            y = self.head(self.vit(self.mv2(self.stem(x))))
            return self.classifier(y.mean((2, 3)))

    class TextEncoder(nn.Module):
        """A BERT-style text encoder: token and position embeddings (Gather), transformer blocks whose
        attention ignores the padding tokens (id 0: a mask made in the graph from the ids, added to
        the scores), the first token's vector normalised and projected."""

        def __init__(self, vocab=1000, tokens=32, dim=64, heads=4, depth=2, classes=8):
            super().__init__()
            self.tokens, self.positions = nn.Embedding(vocab, dim), nn.Parameter(torch.randn(1, tokens, dim))
            self.blocks = nn.ModuleList(Block(dim, heads, 4 * dim) for _ in range(depth))
            self.norm, self.out = nn.LayerNorm(dim), nn.Linear(dim, classes)

        def forward(self, ids):  # [1, tokens]
            x = self.tokens(ids) + self.positions
            bias = (ids == 0).float()[:, None, None, :] * -10000.0
            for block in self.blocks:
                x = block(x, bias)
            return self.out(torch.tanh(self.norm(x)[:, 0]))

    return SegHead, AudioRnn, TextRecognizer, ByteCnn, MobileVit, TextEncoder


def _SegHead():  # noqa: N802
    import zoo_nets

    return zoo_nets.randomise(_torch_modules()[0]())


def _zoo_module(index: int):
    """Module ``index`` of ``_torch_modules()``, randomised (zoo_nets.randomise), with random
    LayerNorm affine parameters, so the check sees them."""
    import torch

    import zoo_nets

    net = zoo_nets.randomise(_torch_modules()[index]())
    g = torch.Generator().manual_seed(2)
    for m in net.modules():
        if isinstance(m, torch.nn.LayerNorm):
            m.weight.data = 0.5 + torch.rand(m.weight.shape, generator=g)
            m.bias.data = 0.1 * torch.randn(m.bias.shape, generator=g)
    return net


def _AudioRnn():  # noqa: N802
    import zoo_nets

    return zoo_nets.randomise(_torch_modules()[1]())


def _det_head(work: Path) -> Path:
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


def _tflite_operators(model: bytes) -> list[tuple[str, list[int], list[int]]]:
    """(builtin name, input tensors, output tensors) of each operator of subgraph 0."""
    from ai_edge_litert import schema_py_generated as fb

    names = {v: k for k, v in vars(fb.BuiltinOperator).items() if not k.startswith("_")}
    m = fb.ModelT.InitFromObj(fb.Model.GetRootAsModel(model, 0))
    codes = [names[max(c.builtinCode, c.deprecatedBuiltinCode)] for c in m.operatorCodes]
    return [(codes[op.opcodeIndex], list(op.inputs), list(op.outputs)) for op in m.subgraphs[0].operators]


def _tflite_computed_slice(work: Path) -> Path:
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
    ops = _tflite_operators(model)
    computed = {t: name for name, _, outs in ops for t in outs}
    slices = [ins for name, ins, _ in ops if name == "STRIDED_SLICE" and computed.get(ins[0]) != "SHAPE"]
    assert any(computed.get(t) == "PACK" for ins in slices for t in ins[1:3]), "no computed STRIDED_SLICE bounds"
    assert {"SHAPE", "EXPAND_DIMS"} <= {name for name, _, _ in ops}, "expected SHAPE and EXPAND_DIMS"
    path = work / "tflite_computed_slice.tflite"
    path.write_bytes(model)
    return path


def _tflite_dynamic_batch(work: Path) -> Path:
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


def _selfie_seg_fp16(work: Path) -> Path:
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


def _gru_scorer(work: Path, opset: int) -> Path:
    """Audio-quality scorers as exporters of old opsets write them, with a dynamic batch and frame count
    that ``--input`` fixes. Opset 9: a conv front end, two GRU stacks whose initial states are slices
    of one state input ``h0`` (Slice with starts/ends as attributes), the new state out. Opset 11: the
    GRU's initial state built from the batch size (Shape, Gather, ConstantOfShape), its last state
    through Gemm and LeakyRelu into a 0-d mean."""
    import torch

    import zoo_nets

    class Opset9(torch.nn.Module):
        def __init__(self):
            super().__init__()
            self.conv = torch.nn.Conv1d(40, 64, 3, padding=1)
            self.g1 = torch.nn.GRU(64, 64, num_layers=2, batch_first=True)
            self.g2 = torch.nn.GRU(64, 64, num_layers=2, batch_first=True)
            self.fc = torch.nn.Linear(64, 1)

        def forward(self, x, h0):
            y = torch.relu(self.conv(x)).transpose(1, 2)
            y, h1 = self.g1(y, h0[0:2])
            y, h2 = self.g2(y, h0[2:4])
            return torch.sigmoid(self.fc(y)).squeeze(-1), torch.cat([h1, h2], 0)

    class Opset11(torch.nn.Module):
        def __init__(self):
            super().__init__()
            self.gru = torch.nn.GRU(40, 64, batch_first=True)
            self.fc = torch.nn.Linear(64, 1)

        def forward(self, x):
            _, h = self.gru(x)
            return torch.nn.functional.leaky_relu(self.fc(h[-1]), 0.1).mean()

    path = work / f"gru_scorer_opset{opset}.onnx"
    if opset == 9:
        net, example = Opset9(), (torch.randn(1, 40, 30), torch.randn(4, 1, 64))
        names, dynamic = ["x", "h0"], {"x": {0: "batch", 2: "frames"}, "h0": {1: "batch"}}
    else:
        net, example = Opset11(), (torch.randn(1, 50, 40),)
        names, dynamic = ["x"], {"x": {0: "batch", 1: "frames"}}
    with torch.no_grad():
        torch.onnx.export(
            zoo_nets.randomise(net).eval(),
            example,
            str(path),
            opset_version=opset,
            dynamo=False,
            input_names=names,
            dynamic_axes=dynamic,
        )
    return path


def _vad_if(work: Path, scalar: bool = False) -> Path:
    """A voice-activity detector's control flow: one LSTM per sample rate in an If on ``sr``.

    ``scalar``: as silero-vad runs it, ``sr`` stays a 0-d input (no --const), also scales the
    output (sr / 16000), and the model has a second, 0-d output (the mean)."""
    import onnx
    from onnx import TensorProto, helper, numpy_helper

    rng = np.random.default_rng(4)

    def w(name, *shape):
        return numpy_helper.from_array(rng.standard_normal(shape).astype(np.float32) * 0.3, name)

    def branch(tag):
        nodes = [
            helper.make_node("LSTM", ["x", f"W{tag}", f"R{tag}", f"B{tag}"], [f"y{tag}"], hidden_size=32),
            helper.make_node("Squeeze", [f"y{tag}", "one"], [f"out{tag}"]),
        ]
        return helper.make_graph(
            nodes,
            f"sr_{tag}",
            [],
            [helper.make_tensor_value_info(f"out{tag}", 1, None)],
            [w(f"W{tag}", 1, 128, 64), w(f"R{tag}", 1, 128, 32), w(f"B{tag}", 1, 256)],
        )

    nodes = [
        helper.make_node("Equal", ["sr", "k16000"], ["is16k"]),
        helper.make_node(
            "If", ["is16k"], ["y" if not scalar else "h"], then_branch=branch("a"), else_branch=branch("b")
        ),
    ]
    outputs = [helper.make_tensor_value_info("y", TensorProto.FLOAT, None)]
    consts = [
        numpy_helper.from_array(np.array(16000, np.int64), "k16000"),
        numpy_helper.from_array(np.array([1], np.int64), "one"),
    ]
    if scalar:
        nodes += [
            helper.make_node("Cast", ["sr"], ["srf"], to=TensorProto.FLOAT),
            helper.make_node("Div", ["srf", "f16000"], ["scale"]),
            helper.make_node("Mul", ["h", "scale"], ["y"]),
            helper.make_node("ReduceMean", ["y"], ["mean"], keepdims=0),
        ]
        consts.append(numpy_helper.from_array(np.array(16000, np.float32), "f16000"))
        outputs.append(helper.make_tensor_value_info("mean", TensorProto.FLOAT, []))
    graph = helper.make_graph(
        nodes,
        "vad",
        [
            helper.make_tensor_value_info("x", TensorProto.FLOAT, [16, 1, 64]),
            helper.make_tensor_value_info("sr", TensorProto.INT64, []),
        ],
        outputs,
        consts,
    )
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    model.ir_version = 8
    path = work / f"vad_{'scalar' if scalar else 'if'}.onnx"
    onnx.save(model, str(path))
    return path


# =========================================================================== one model (child process)


def reference_runner(path: Path, consts: dict, threads: int = 1):
    """The reference runtime, loaded once: inputs -> outputs."""
    if path.suffix == ".tflite":
        from ai_edge_litert.interpreter import Interpreter

        interp = Interpreter(model_path=str(path), num_threads=threads)
        interp.allocate_tensors()
        ins, outs = interp.get_input_details(), interp.get_output_details()

        def run_litert(inputs):
            for d in ins:
                interp.set_tensor(d["index"], inputs[d["name"]])
            interp.invoke()
            return [interp.get_tensor(d["index"]) for d in outs]

        return run_litert
    import onnxruntime as ort

    opts = ort.SessionOptions()
    opts.intra_op_num_threads = opts.inter_op_num_threads = threads
    opts.log_severity_level = 3
    sess = ort.InferenceSession(str(path), opts, providers=["CPUExecutionProvider"])
    return lambda inputs: sess.run(None, {**inputs, **consts})


def _consts(flags: list[str], path: Path) -> dict:
    """--const flags as the reference's extra inputs (dtype from the model)."""
    import onnx

    flags, _ = split_flags(flags)
    if not flags:
        return {}
    types = {vi.name: vi.type.tensor_type.elem_type for vi in onnx.load(str(path)).graph.input}
    from onnx.helper import tensor_dtype_to_np_dtype

    return {n: np.array(float(v), tensor_dtype_to_np_dtype(types[n])) for n, v in (f.split("=", 1) for f in flags)}


def max_error(actual, expected) -> float:
    return max(
        float(np.max(np.abs(a.astype(np.float64) - e.astype(np.float64)))) if a.size else 0.0
        for a, e in zip(actual, expected)
    )


def run_one(name: str, targets: list[str], work: Path, runs: int, runtimes: dict, compile=None) -> dict:
    """Build, compile, check (and time) one zoo model on each target. ``compile(path, flags, platform,
    device)``, when given, returns the artifact instead of a `tvmgen compile` run (the tests pass their
    session's shared build, so no model is compiled twice in one test run)."""
    row = {"model": name, "what": WHAT.get(name, "classifier"), "targets": {}}
    t0 = time.perf_counter()
    path, flags = build(name, work)
    row["format"] = "tflite" if path.suffix == ".tflite" else "onnx"
    row["build_s"] = time.perf_counter() - t0
    consts = _consts(flags, path)
    for target in targets:
        platform, device = TARGETS[target]
        out = work / f"{name}-{target}"
        t0 = time.perf_counter()
        if compile is not None:
            out = compile(path, flags, platform, device)
            row["targets"][target] = {"compile_s": time.perf_counter() - t0}
            _check_target(name, target, out, path, consts, work, runs, runtimes, row["targets"][target])
            continue
        proc = subprocess.run(
            [
                sys.executable,
                "-m",
                "tvmgen",
                "compile",
                str(path),
                "--platform",
                platform,
                "--device",
                device,
                "-o",
                str(out),
                "--force",
                *flags,
            ],
            capture_output=True,
            text=True,
            env=dict(os.environ, COLUMNS="200"),
        )
        cell = {"compile_s": time.perf_counter() - t0}
        row["targets"][target] = cell
        if proc.returncode != 0:
            cell.update(status="compile failed", error=_last_error(proc))
            continue
        _check_target(name, target, out, path, consts, work, runs, runtimes, cell)
    return row


def _check_target(name, target, out, path, consts, work, runs, runtimes, cell) -> None:
    """Run the artifact ``out`` against the reference on the zoo's inputs; the verdict goes in ``cell``."""
    from tvmgen.core.artifact import load

    manifest = load(out)
    reference = reference_runner(path, consts)
    try:
        checks = []
        timing = None
        if manifest.state:  # a streaming model: steps in order, the state carried on both sides
            checks.append(zoo_state_pairs.sequence_check(target, out, path, consts, work, runtimes, reference_runner))
        for values in () if manifest.state else INPUT_VALUES.get(name, ({},)):
            inputs = model_inputs(manifest.inputs, 0, values)
            actual, timing = _run_target(target, out, inputs, work, runs, runtimes)
            checks.append((actual, reference(inputs), reference(model_inputs(manifest.inputs, 1, values))))
    except Exception as e:
        cell.update(status="run failed", error=f"{type(e).__name__}: {str(e).strip().splitlines()[-1][:200]}")
        return
    if "int8" in name:
        cell.update(_int8_check(*checks[0]))
    else:
        err = max(max_error(actual, expected) for actual, expected, _ in checks)
        tol = min(tolerance(expected) for _, expected, _ in checks)
        # the check means something only if another input moves the outputs well beyond the tolerance
        moved = min(max_error(other, expected) for _, expected, other in checks)
        status = "VACUOUS" if moved <= 10 * tol else "ok" if err <= tol else "MISMATCH"
        cell.update(status=status, max_error=err, tolerance=tol, input_sensitivity=moved)
    if timing is not None:
        cell.update(timing)


def model_inputs(specs, seed: int, values: dict) -> dict:
    """Seeded random inputs, with ``values`` (name -> number) set as arrays of the input's dtype."""
    from tvmgen.core.model import random_inputs

    inputs = random_inputs(specs, seed=seed)
    for s in specs:
        if s.name in values:
            inputs[s.name] = np.full(s.shape, values[s.name], s.dtype)
    return inputs


def tolerance(expected) -> float:
    """The float models' tolerance: that of `tvmgen compile --check` (1e-4 + 1e-3 x the largest output)."""
    return 1e-4 + 1e-3 * (max(float(np.max(np.abs(e))) for e in expected) or 1.0)


def int8_difference(actual, expected) -> tuple[float, float, bool]:
    """(mean difference, one output quantum (range / 255), same top class) of a full-integer model."""
    q = max(float(e.max() - e.min()) for e in expected) / 255 or 1.0
    mean_err = max(float(np.mean(np.abs(a.astype(np.float64) - e))) for a, e in zip(actual, expected))
    top1 = all(int(np.argmax(a)) == int(np.argmax(e)) for a, e in zip(actual, expected))
    return mean_err, q, top1


def _int8_check(actual, expected, other) -> dict:
    """Full-integer models. TVM 0.27's TFLite importer runs them as dequantize -> float operator ->
    quantize, LiteRT with integer kernels: the two round differently at every layer, and over a deep
    network the outputs drift apart by a few output quanta (quantum = the output's range / 255).
    Passing: the mean difference is at most 2 quanta and the top class is the same; the check is
    VACUOUS when another input moves the reference by no more than that."""
    mean_err, q, top1 = int8_difference(actual, expected)
    moved = max(float(np.mean(np.abs(o.astype(np.float64) - e))) for o, e in zip(other, expected))
    status = "VACUOUS" if moved <= 2 * q else "ok" if mean_err <= 2 * q and top1 else "MISMATCH"
    return {
        "status": status,
        "max_error": max_error(actual, expected),
        "mean_error_quanta": mean_err / q,
        "same_top1": top1,
        "tolerance": 2 * q,
        "input_sensitivity_quanta": moved / q,
    }


def _last_error(proc) -> str:
    lines = [ln.strip() for ln in (proc.stdout + proc.stderr).splitlines() if ln.strip().startswith("error:")]
    return (lines[-1] if lines else (proc.stderr.strip().splitlines() or ["?"])[-1])[:300]


def _run_target(target: str, artifact: Path, inputs: dict, work: Path, runs: int, runtimes: dict):
    if target == "host":
        from tvmgen.runtime.runner import HostModel

        model = HostModel(artifact)
        actual = model.run(inputs)
        return actual, None
    runner = runtimes[target]
    tmp = Path(tempfile.mkdtemp(dir=work))
    args = []
    for n, arr in inputs.items():
        np.save(tmp / f"in{len(args)}.npy", arr)
        args += ["--input", f"{n}={tmp / f'in{len(args)}.npy'}"]
    cmd = [str(runner), str(artifact), *args, "-o", str(tmp / "out")]
    if target == "aarch64":
        cmd = ["qemu-aarch64", "-L", "/usr/aarch64-linux-gnu", *cmd]
    proc = subprocess.run(cmd, capture_output=True, text=True, timeout=1800)
    if proc.returncode != 0:
        raise RuntimeError(proc.stderr.strip() or f"exit {proc.returncode}")
    manifest = json.loads((artifact / "manifest.json").read_text())
    from tvmgen.runtime.runner import output_file_name

    return [np.load(tmp / "out" / output_file_name(o["name"])) for o in manifest["outputs"]], None


def time_host(name: str, work: Path, runs: int) -> dict:
    """tvmgen vs the reference at one thread, round robin, medians (in this child: TVM_NUM_THREADS=1)."""
    from tvmgen.runtime.runner import HostModel

    path = next(p for p in work.iterdir() if p.stem == name and p.suffix in (".onnx", ".tflite"))
    flags = build_flags(name)
    model = HostModel(work / f"{name}-host")
    inputs = model_inputs(model.inputs, 0, INPUT_VALUES.get(name, ({},))[0])  # a streaming model's own: each run a step
    ref = zoo_state_pairs.reference_stepper(
        path, model.manifest, model.directory, reference_runner(path, _consts(flags, path))
    )
    timed = [benchlib.Timed("tvmgen", lambda: model.run(inputs)), benchlib.Timed("reference", lambda: ref(inputs))]
    benchlib.round_robin(timed, warmup=3, runs=runs, rounds=3, min_time=0.2)
    return {t.key: benchlib.median(t.times_ms) for t in timed}


def split_flags(flags) -> tuple[list[str], list[str]]:
    """A model's flags as (the --const values, the --input values)."""
    pairs = list(zip(flags[::2], flags[1::2], strict=True))
    return [v for f, v in pairs if f == "--const"], [v for f, v in pairs if f == "--input"]


def build_flags(name: str) -> list[str]:
    return list(FLAGS.get(name, ()))


# =========================================================================== table


def format_table(rows: list[dict], targets: list[str]) -> str:
    header = ["model", "format", "adds", *[f"{t}" for t in targets], "max error (host)", "tvmgen ms", "ref ms", "ratio"]
    body = []
    for r in rows:
        cells = [r["model"], r.get("format", "-"), r.get("what", "")]
        for t in targets:
            c = r.get("targets", {}).get(t, {})
            cells.append(c.get("status", "-"))
        host = r.get("targets", {}).get("host", {})
        cells.append(f"{host['max_error']:.1e}" if "max_error" in host else "-")
        tv, ref = r.get("tvmgen_ms"), r.get("reference_ms")
        cells += [
            benchlib.fmt_num(tv) if tv else "-",
            benchlib.fmt_num(ref) if ref else "-",
            benchlib.fmt_ratio(benchlib.ratio(tv, ref)) if tv and ref else "-",
        ]
        body.append(cells)
    return benchlib.table(header, body, right={len(header) - 4, len(header) - 3, len(header) - 2, len(header) - 1})


def geomean(values):
    values = [v for v in values if v]
    return float(np.exp(np.mean(np.log(values)))) if values else None


def main() -> None:
    p = benchlib.parser(__doc__)
    benchlib.models_option(p, MODELS)
    p.add_argument("--targets", default="host", help="comma-separated: host, aarch64, opencl, vulkan [default: host]")
    p.add_argument("--runs", type=int, default=20, help="timed runs per engine and round [default: 20]")
    p.add_argument("--keep", type=Path, help="work directory to keep (models, artifacts)")
    p.add_argument("--one", help=argparse_hidden())
    p.add_argument("--runtimes", help=argparse_hidden())
    p.add_argument("--build-only", help=argparse_hidden())  # benchmarks/speed.py: make one model file in --keep
    benchlib.json_option(p)
    args = p.parse_args()
    if args.one:
        return _child(args)
    if args.build_only:
        print(build(args.build_only, Path(args.keep))[0])
        return
    models = benchlib.pick_models(args.models, MODELS, p.error)
    targets = [t for t in args.targets.split(",") if t]
    bad = [t for t in targets if t not in TARGETS]
    if bad:
        p.error(f"unknown target(s) {', '.join(bad)}; choose from {', '.join(TARGETS)}")
    work = Path(args.keep or tempfile.mkdtemp(prefix="tvmgen-zoo-")).absolute()
    work.mkdir(parents=True, exist_ok=True)
    runtimes = _runtimes(targets, work)
    rows = []
    for i, name in enumerate(models, 1):
        benchlib.progress(f"[{i}/{len(models)}] {name}: build, compile ({', '.join(targets)}), check")
        proc = subprocess.run(
            [
                sys.executable,
                __file__,
                "--one",
                name,
                "--targets",
                ",".join(targets),
                "--keep",
                str(work),
                "--runs",
                str(args.runs),
                "--runtimes",
                json.dumps({k: str(v) for k, v in runtimes.items()}),
            ],
            capture_output=True,
            text=True,
            env=benchlib.thread_env(1),
        )
        try:
            row = json.loads(proc.stdout.strip().splitlines()[-1])
        except (IndexError, json.JSONDecodeError):
            row = {
                "model": name,
                "targets": {t: {"status": "crashed"} for t in targets},
                "error": (proc.stderr.strip().splitlines() or ["?"])[-1][:300],
            }
        rows.append(row)
        for t, c in row.get("targets", {}).items():
            if c.get("status") != "ok":
                benchlib.log(f"  {name} {t}: {c.get('status')}: {c.get('error', '')}")
    print(format_table(rows, targets))
    ratios = [r["tvmgen_ms"] / r["reference_ms"] for r in rows if r.get("tvmgen_ms") and r.get("reference_ms")]
    gm = geomean(ratios)
    passed = sum(all(c.get("status") == "ok" for c in r["targets"].values()) for r in rows)
    print(
        f"\n{passed}/{len(rows)} models pass on every target; tvmgen / reference at 1 thread, geometric mean: {gm:.2f}x"
        if gm
        else f"\n{passed}/{len(rows)} models pass on every target"
    )
    if args.json:
        benchlib.write_json(args.json, "zoo", {"targets": targets, "rows": rows, "geomean_ratio": gm})
    sys.exit(0 if passed == len(rows) else 1)


def argparse_hidden():
    import argparse

    return argparse.SUPPRESS


def _runtimes(targets: list[str], work: Path) -> dict:
    from tvmgen.runtime import runtime_build

    found = {}
    if "aarch64" in targets:
        benchlib.progress(
            "the aarch64 runtime (cmake, cross g++; reused from the user cache while jni/ is unchanged) ..."
        )
        found["aarch64"] = runtime_build.cached_build("linux-aarch64") / "bin" / "tvmgen-run"
    if "opencl" in targets:
        found["opencl"] = benchlib.opencl_runtime(None, work, benchlib.progress) / "bin" / "tvmgen-run"
    if "vulkan" in targets:
        prefix = runtime_build.cached_build("host")
        if not (prefix / "lib" / "libtvmgen_vulkan.so").is_file():
            raise SystemExit(f"{prefix}/lib has no libtvmgen_vulkan.so (the runtime build needs libvulkan-dev)")
        found["vulkan"] = prefix / "bin" / "tvmgen-run"
    return found


def _child(args) -> None:
    work = Path(args.keep)
    runtimes = {k: Path(v) for k, v in json.loads(args.runtimes or "{}").items()}
    targets = [t for t in args.targets.split(",") if t]

    def compute():
        row = run_one(args.one, targets, work, args.runs, runtimes)
        if row["targets"].get("host", {}).get("status") == "ok":
            t = time_host(args.one, work, args.runs)
            row.update(tvmgen_ms=t["tvmgen"], reference_ms=t["reference"])
        return row

    print(json.dumps(compute()))


if __name__ == "__main__":
    main()
