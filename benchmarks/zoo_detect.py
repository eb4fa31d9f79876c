"""Zoo models for GPU paths the classifiers do not reach, built here with random weights from their published
layer tables (nothing downloaded):

yolov8n_320 / yolov8n_640   a YOLOv8n-style detector (width 0.25, depth 0.33): a CSP backbone of C2f blocks
                            (a 1x1 split in two, bottlenecks on one half, every stage's output concatenated),
                            SPPF (three chained 5x5 max pools, concatenated), a PAN neck (nearest upsampling,
                            concatenation, C2f), and the anchor-free decoupled head on strides 8, 16 and 32: per
                            level a box branch (two 3x3 convolutions, 4 x 16 distribution bins) and a class
                            branch (80 classes), then the distribution focal decoding (a softmax over the 16 bins
                            and their expectation as a 1x1 convolution) and the boxes from the anchor points,
                            as Ultralytics' export writes it: [1, 84, anchors] (2,100 at 320, 8,400 at 640)
raw_audio_cnn               an audio-quality scorer over 9 s of raw 16 kHz audio (144,000 samples): the framing
                            is a strided Conv1d (400-sample windows, hop 160), then strided Conv1d blocks with
                            batch norm and ReLU, and a 1x1 convolution to a score per 0.16 s segment
"""

from __future__ import annotations

from pathlib import Path

# name -> input side
YOLO = {"yolov8n_320": 320, "yolov8n_640": 640}
AUDIO_SAMPLES, FRAME, HOP = 144_000, 400, 160
NAMES = (*YOLO, "raw_audio_cnn")
CLASSES, BINS = 80, 16
# YOLOv8n: channels per stage (64, 128, 256, 512, 1024 x width 0.25) and C2f repeats (3, 6, 6, 3 x depth 0.33)
WIDTHS, REPEATS = (16, 32, 64, 128, 256), (1, 2, 2, 1)


def build(name: str, work: Path) -> Path:
    """The ONNX file of zoo model ``name`` (one of NAMES) in ``work``."""
    import torch

    import zoo_nets

    torch.manual_seed(0)
    if name in YOLO:
        side = YOLO[name]
        net, example = zoo_nets.randomise(yolov8n()), torch.randn(1, 3, side, side)
        net.detect.dfl.weight.data[:] = torch.arange(BINS, dtype=torch.float32).view(1, BINS, 1, 1)  # fixed
    elif name == "raw_audio_cnn":
        net, example = zoo_nets.randomise(raw_audio_cnn()), torch.randn(1, 1, AUDIO_SAMPLES)
    else:
        raise SystemExit(f"unknown model {name}")
    path = work / f"{name}.onnx"
    with torch.no_grad():
        torch.onnx.export(net.eval(), example, str(path), opset_version=17, dynamo=False)
    return path


def yolov8n():
    """[1, 3, S, S] -> [1, 4 + 80, anchors]: boxes (x, y, w, h in input pixels) and class probabilities."""
    import torch
    from torch import nn

    def conv(cin, cout, k=1, s=1):
        return nn.Sequential(nn.Conv2d(cin, cout, k, s, k // 2, bias=False), nn.BatchNorm2d(cout), nn.SiLU())

    class Bottleneck(nn.Module):
        def __init__(self, c, shortcut):
            super().__init__()
            self.cv1, self.cv2, self.add = conv(c, c, 3), conv(c, c, 3), shortcut

        def forward(self, x):
            y = self.cv2(self.cv1(x))
            return x + y if self.add else y

    class C2f(nn.Module):
        def __init__(self, cin, cout, n, shortcut=True):
            super().__init__()
            self.c = cout // 2
            self.cv1, self.cv2 = conv(cin, 2 * self.c), conv((2 + n) * self.c, cout)
            self.m = nn.ModuleList(Bottleneck(self.c, shortcut) for _ in range(n))

        def forward(self, x):
            y = list(self.cv1(x).split((self.c, self.c), 1))
            for m in self.m:
                y.append(m(y[-1]))
            return self.cv2(torch.cat(y, 1))

    class SPPF(nn.Module):
        def __init__(self, cin, cout):
            super().__init__()
            self.cv1, self.cv2 = conv(cin, cin // 2), conv(cin // 2 * 4, cout)
            self.m = nn.MaxPool2d(5, 1, 2)

        def forward(self, x):
            y = [self.cv1(x)]
            for _ in range(3):
                y.append(self.m(y[-1]))
            return self.cv2(torch.cat(y, 1))

    class Detect(nn.Module):
        def __init__(self, channels):
            super().__init__()
            c2, c3 = max(16, channels[0] // 4, 4 * BINS), max(channels[0], min(CLASSES, 100))
            self.box = nn.ModuleList(
                nn.Sequential(conv(c, c2, 3), conv(c2, c2, 3), nn.Conv2d(c2, 4 * BINS, 1)) for c in channels
            )
            self.cls = nn.ModuleList(
                nn.Sequential(conv(c, c3, 3), conv(c3, c3, 3), nn.Conv2d(c3, CLASSES, 1)) for c in channels
            )
            self.dfl = nn.Conv2d(BINS, 1, 1, bias=False).requires_grad_(False)
            self.dfl.weight.data[:] = torch.arange(BINS, dtype=torch.float32).view(1, BINS, 1, 1)

        def forward(self, feats):
            outs, anchors, strides = [], [], []
            for i, f in enumerate(feats):
                outs.append(torch.cat((self.box[i](f), self.cls[i](f)), 1).flatten(2))
                h, w = f.shape[2:]
                stride = 8 * 2**i
                # float32 anchor points, as Ultralytics' make_anchors makes them (in the features' dtype)
                ys = torch.arange(h, dtype=torch.float32) + 0.5
                xs = torch.arange(w, dtype=torch.float32) + 0.5
                sy, sx = torch.meshgrid(ys, xs, indexing="ij")
                anchors.append(torch.stack((sx, sy), 0).reshape(2, -1))
                strides.append(torch.full((1, h * w), float(stride), dtype=torch.float32))
            y = torch.cat(outs, 2)
            box, cls = y.split((4 * BINS, CLASSES), 1)
            b, _, a = box.shape
            dist = self.dfl(box.view(b, 4, BINS, a).transpose(2, 1).softmax(1)).view(b, 4, a)  # expectation
            lt, rb = dist.chunk(2, 1)
            anchor, stride = torch.cat(anchors, 1).unsqueeze(0), torch.cat(strides, 1).unsqueeze(0)
            x1y1, x2y2 = anchor - lt, anchor + rb
            xywh = torch.cat(((x1y1 + x2y2) / 2, x2y2 - x1y1), 1) * stride
            return torch.cat((xywh, cls.sigmoid()), 1)

    class YOLOv8n(nn.Module):
        def __init__(self):
            super().__init__()
            w, r = WIDTHS, REPEATS
            self.stem = nn.Sequential(conv(3, w[0], 3, 2), conv(w[0], w[1], 3, 2), C2f(w[1], w[1], r[0]))
            self.p3 = nn.Sequential(conv(w[1], w[2], 3, 2), C2f(w[2], w[2], r[1]))
            self.p4 = nn.Sequential(conv(w[2], w[3], 3, 2), C2f(w[3], w[3], r[2]))
            self.p5 = nn.Sequential(conv(w[3], w[4], 3, 2), C2f(w[4], w[4], r[3]), SPPF(w[4], w[4]))
            self.up = nn.Upsample(scale_factor=2, mode="nearest")
            self.top4 = C2f(w[4] + w[3], w[3], r[0], shortcut=False)
            self.top3 = C2f(w[3] + w[2], w[2], r[0], shortcut=False)
            self.down3, self.bottom4 = conv(w[2], w[2], 3, 2), C2f(w[2] + w[3], w[3], r[0], shortcut=False)
            self.down4, self.bottom5 = conv(w[3], w[3], 3, 2), C2f(w[3] + w[4], w[4], r[0], shortcut=False)
            self.detect = Detect((w[2], w[3], w[4]))

        def forward(self, x):
            p3 = self.p3(self.stem(x))
            p4 = self.p4(p3)
            p5 = self.p5(p4)
            t4 = self.top4(torch.cat((self.up(p5), p4), 1))
            n3 = self.top3(torch.cat((self.up(t4), p3), 1))
            n4 = self.bottom4(torch.cat((self.down3(n3), t4), 1))
            n5 = self.bottom5(torch.cat((self.down4(n4), p5), 1))
            return self.detect((n3, n4, n5))

    return YOLOv8n()


def raw_audio_cnn():
    """[1, 1, 144000] -> [1, 1, 57]: frames by a strided Conv1d (400 samples, hop 160: 898 frames, 64 channels),
    four strided Conv1d + BatchNorm + ReLU blocks (64 -> 128 -> 128 -> 256 -> 256 channels, stride 2 each) and
    a 1x1 convolution to a score per 0.16 s segment."""
    from torch import nn

    def block(cin, cout, k=5, s=2):
        return nn.Sequential(nn.Conv1d(cin, cout, k, s, k // 2, bias=False), nn.BatchNorm1d(cout), nn.ReLU())

    return nn.Sequential(
        nn.Conv1d(1, 64, FRAME, HOP),
        nn.BatchNorm1d(64),
        nn.ReLU(),
        block(64, 128),
        block(128, 128),
        block(128, 256),
        block(256, 256),
        nn.Conv1d(256, 1, 1),
    )
