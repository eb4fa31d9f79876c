"""The zoo's models, built here with random weights (nothing is downloaded): the PyTorch classifiers of
zoo_nets.py, the Keras ones and the TFLite heads of zoo_tflite.py, the heads of zoo_heads.py, the detector
and raw-audio CNN of zoo_detect.py, and the heads and audio models defined below, each as its model file
and the `tvmgen compile` flags it needs."""

from __future__ import annotations

from pathlib import Path

import numpy as np

import zoo_detect
import zoo_heads
import zoo_state_pairs
import zoo_tflite
from zoo_nets import NAMES as TORCH_NETS
from zoo_tflite import KERAS

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
    *zoo_heads.NAMES,
    *zoo_detect.NAMES,
)
MODELS = (*TORCH_NETS, *KERAS, *OTHERS)
# `tvmgen compile` flags a model needs: --const binds an input (the reference gets its value), --input fixes
# the dynamic sizes an exporter left
FLAGS = {
    "vad_if": ("--const", "sr=16000"),
    "gru_scorer_opset9": ("--input", "x:1x40x30", "--input", "h0:4x1x64"),
    "gru_scorer_opset11": ("--input", "x:1x50x40"),
    "stream_gru": zoo_state_pairs.FLAGS,
}


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
        return zoo_tflite.keras_tflite(name, work), []
    if name == "seg_head":
        return _onnx_from_torch(_SegHead(), torch.randn(1, 3, 128, 128), work / "seg_head.onnx"), []
    if name == "det_head_tflite":
        return zoo_tflite.det_head(work), []
    if name == "selfie_seg_fp16":
        return zoo_tflite.selfie_seg_fp16(work), []
    if name == "tflite_computed_slice":
        return zoo_tflite.tflite_computed_slice(work), []
    if name == "tflite_dynamic_batch":
        return zoo_tflite.tflite_dynamic_batch(work), []
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
    if name in zoo_heads.NAMES:
        return zoo_heads.build(name, work), []
    if name in zoo_detect.NAMES:
        return zoo_detect.build(name, work), []
    if name in ("gru_scorer_opset9", "gru_scorer_opset11"):
        return _gru_scorer(work, int(name.rsplit("opset", 1)[1])), build_flags(name)
    raise SystemExit(f"unknown model {name}")


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


def build_flags(name: str) -> list[str]:
    return list(FLAGS.get(name, ()))
