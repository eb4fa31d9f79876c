"""Zoo models whose time is one kind of kernel or the call itself, built here with random weights:

ctc_recognizer_6k / _8k / _18k   CTC text recognizers (PP-OCR's and captcha solvers' shape): a small
                                 convolution backbone to one feature column per step, then a classifier
                                 per column, matmul [1, T, C] x [C, N] with N the character set (6,625,
                                 8,210 and 18,385 classes; C = 120, 1,024 and 120; 3-34 MB of weights, more
                                 than a core's L2) and a softmax: the head is most of a run
tiny_dense_head                  a wake-word head (Gemm 64 -> 32, ReLU, Gemm 32 -> 2, softmax): a few
                                 microseconds, nearly all the cost of a call
mel_frontend                     a mel-spectrogram front end over 0.25 s of 16 kHz audio: the STFT as a
                                 1-D convolution (400-sample frames, hop 160, cosine and sine kernels),
                                 power, a mel matmul (201 -> 40 bins) and log
"""

from __future__ import annotations

from pathlib import Path

import numpy as np

# name -> (feature channels C, classes N, steps T)
CTC = {
    "ctc_recognizer_6k": (120, 6625, 40),
    "ctc_recognizer_8k": (1024, 8210, 64),
    "ctc_recognizer_18k": (120, 18385, 40),
}
NAMES = (*CTC, "tiny_dense_head", "mel_frontend")
SAMPLES, N_FFT, HOP, MELS = 4000, 400, 160, 40


def build(name: str, work: Path) -> Path:
    """The ONNX file of zoo model ``name`` (one of NAMES) in ``work``."""
    import torch

    import zoo_nets

    torch.manual_seed(0)
    if name in CTC:
        channels, classes, steps = CTC[name]
        net, example = zoo_nets.randomise(_ctc_recognizer(channels, classes)), torch.randn(1, 3, 32, 4 * steps)
    elif name == "tiny_dense_head":
        net, example = zoo_nets.randomise(_tiny_dense_head()), torch.randn(1, 64)
    elif name == "mel_frontend":
        net, example = _mel_frontend(), torch.randn(1, 1, SAMPLES)
    else:
        raise SystemExit(f"unknown model {name}")
    path = work / f"{name}.onnx"
    with torch.no_grad():
        torch.onnx.export(net, example, str(path), opset_version=17, dynamo=False)
    return path


def _ctc_recognizer(channels: int, classes: int):
    """[1, 3, 32, 4T] -> [1, T, classes]: three strided convolutions (height 32 -> 4, width 4T -> T), the
    height averaged away, a per-step classifier and its softmax."""
    from torch import nn

    class CtcRecognizer(nn.Module):
        def __init__(self):
            super().__init__()
            self.backbone = nn.Sequential(
                nn.Conv2d(3, 32, 3, 2, 1), nn.ReLU(),
                nn.Conv2d(32, 64, 3, 2, 1), nn.ReLU(),
                nn.Conv2d(64, channels, 3, (2, 1), 1), nn.ReLU(),
            )  # fmt: skip
            self.head = nn.Linear(channels, classes)

        def forward(self, x):
            cols = self.backbone(x).mean(2).transpose(1, 2)  # [1, T, C]
            return self.head(cols).softmax(-1)

    return CtcRecognizer()


def _tiny_dense_head():
    from torch import nn

    return nn.Sequential(nn.Linear(64, 32), nn.ReLU(), nn.Linear(32, 2), nn.Softmax(-1))


def _mel_filters(bins: int, mels: int, rate: int = 16000) -> np.ndarray:
    """[bins, mels] triangular filters evenly spaced on the mel scale (HTK's formula)."""
    hz = np.linspace(0, rate / 2, bins)
    mel = 2595 * np.log10(1 + hz / 700)
    edges = np.linspace(mel[0], mel[-1], mels + 2)
    lo, mid, hi = edges[:-2, None], edges[1:-1, None], edges[2:, None]
    up, down = (mel[None] - lo) / (mid - lo), (hi - mel[None]) / (hi - mid)
    return np.maximum(0, np.minimum(up, down)).T.astype(np.float32)


def _mel_frontend():
    """[1, 1, samples] -> [1, frames, MELS]; its STFT kernels are the transform's, not random."""
    import torch
    from torch import nn

    bins = N_FFT // 2 + 1
    n = np.arange(N_FFT)
    window = 0.5 - 0.5 * np.cos(2 * np.pi * n / N_FFT)  # Hann
    freq = np.arange(bins)[:, None] * n[None] * 2 * np.pi / N_FFT
    kernels = np.concatenate([np.cos(freq), -np.sin(freq)]) * window  # [2 x bins, N_FFT]

    class MelFrontend(nn.Module):
        def __init__(self):
            super().__init__()
            self.stft = nn.Conv1d(1, 2 * bins, N_FFT, HOP, bias=False)
            self.stft.weight.data = torch.tensor(kernels[:, None, :], dtype=torch.float32)
            self.register_buffer("mel", torch.tensor(_mel_filters(bins, MELS)))

        def forward(self, audio):
            spec = self.stft(audio)  # [1, 2 x bins, frames]
            power = spec[:, :bins] ** 2 + spec[:, bins:] ** 2
            return torch.log(power.transpose(1, 2) @ self.mel + 1e-6)

    return MelFrontend().eval()
