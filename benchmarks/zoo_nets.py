"""The zoo's PyTorch classifiers, written here from their papers' layer tables (torchvision's
published wheels are CUDA builds that do not load next to the CPU build of PyTorch these machines
use, so the zoo does not depend on torchvision). Weights are random, He-initialised so activations
keep their scale through the depth (with PyTorch's default initialisation every output ends up the
same for any input, and a check against the reference would prove nothing); batch-norm statistics
are randomised too, so folding them is exercised rather than an identity.

    net = build("mobilenet_v2")   # an nn.Module in eval mode, input 1x3x224x224, 1000 classes
"""

from __future__ import annotations

import torch
from torch import nn

NAMES = (
    "mobilenet_v2",
    "mobilenet_v3_small",
    "efficientnet_b0",
    "shufflenet_v2_x1_0",
    "mnasnet1_0",
    "squeezenet1_1",
    "resnet18",
)


def build(name: str) -> nn.Module:
    torch.manual_seed(0)
    net = {
        "mobilenet_v2": mobilenet_v2,
        "mobilenet_v3_small": mobilenet_v3_small,
        "efficientnet_b0": efficientnet_b0,
        "shufflenet_v2_x1_0": shufflenet_v2,
        "mnasnet1_0": mnasnet,
        "squeezenet1_1": squeezenet,
        "resnet18": resnet18,
    }[name]()
    return randomise(net)


def randomise(net: nn.Module) -> nn.Module:
    """He-normal convolution and linear weights, random batch-norm statistics; eval mode."""
    g = torch.Generator().manual_seed(1)
    for m in net.modules():
        if isinstance(m, (nn.Conv2d, nn.Linear)):
            nn.init.kaiming_normal_(m.weight, nonlinearity="relu", generator=g)
        elif isinstance(m, nn.BatchNorm2d):
            n = m.num_features
            m.weight.data = 0.5 + torch.rand(n, generator=g)
            m.bias.data = 0.1 * torch.randn(n, generator=g)
            m.running_mean = 0.1 * torch.randn(n, generator=g)
            m.running_var = 0.5 + torch.rand(n, generator=g)
    return net.eval()


def conv_bn(cin: int, cout: int, k: int = 1, stride: int = 1, groups: int = 1, act: type | None = nn.ReLU):
    layers = [nn.Conv2d(cin, cout, k, stride, (k - 1) // 2, groups=groups, bias=False), nn.BatchNorm2d(cout)]
    return nn.Sequential(*layers, *([act()] if act else []))


def round8(v: float) -> int:
    """Channel counts rounded to a multiple of 8, never more than 10% down (the MobileNet rule)."""
    r = max(8, int(v + 4) // 8 * 8)
    return r + 8 if r < 0.9 * v else r


class SqueezeExcite(nn.Module):
    def __init__(self, c: int, squeeze: int, act: type = nn.ReLU, gate: type = nn.Sigmoid):
        super().__init__()
        self.reduce, self.act, self.expand, self.gate = (
            nn.Conv2d(c, squeeze, 1),
            act(),
            nn.Conv2d(squeeze, c, 1),
            gate(),
        )

    def forward(self, x):
        return x * self.gate(self.expand(self.act(self.reduce(x.mean((2, 3), keepdim=True)))))


class InvertedResidual(nn.Module):
    """1x1 expansion, k x k depthwise, optional squeeze-excitation, 1x1 projection; a residual when shapes allow."""

    def __init__(self, cin, cout, k, stride, hidden, act=nn.ReLU6, se: int = 0, se_act=nn.ReLU, se_gate=nn.Sigmoid):
        super().__init__()
        layers = [conv_bn(cin, hidden, 1, act=act)] if hidden != cin else []
        layers.append(conv_bn(hidden, hidden, k, stride, groups=hidden, act=act))
        if se:
            layers.append(SqueezeExcite(hidden, se, se_act, se_gate))
        layers.append(conv_bn(hidden, cout, 1, act=None))
        self.body, self.residual = nn.Sequential(*layers), stride == 1 and cin == cout

    def forward(self, x):
        return x + self.body(x) if self.residual else self.body(x)


def classifier(features: nn.Module, channels: int, head: nn.Module | None = None) -> nn.Module:
    return nn.Sequential(features, nn.AdaptiveAvgPool2d(1), nn.Flatten(), head or nn.Linear(channels, 1000))


def mobilenet_v2() -> nn.Module:
    layers, cin = [conv_bn(3, 32, 3, 2, act=nn.ReLU6)], 32
    for t, c, n, s in (
        (1, 16, 1, 1),
        (6, 24, 2, 2),
        (6, 32, 3, 2),
        (6, 64, 4, 2),
        (6, 96, 3, 1),
        (6, 160, 3, 2),
        (6, 320, 1, 1),
    ):
        for i in range(n):
            layers.append(InvertedResidual(cin, c, 3, s if i == 0 else 1, cin * t))
            cin = c
    layers.append(conv_bn(cin, 1280, act=nn.ReLU6))
    return classifier(nn.Sequential(*layers), 1280)


def mobilenet_v3_small() -> nn.Module:
    hs, re = nn.Hardswish, nn.ReLU
    layers, cin = [conv_bn(3, 16, 3, 2, act=hs)], 16
    for k, hidden, cout, se, act, s in (
        (3, 16, 16, True, re, 2),
        (3, 72, 24, False, re, 2),
        (3, 88, 24, False, re, 1),
        (5, 96, 40, True, hs, 2),
        (5, 240, 40, True, hs, 1),
        (5, 240, 40, True, hs, 1),
        (5, 120, 48, True, hs, 1),
        (5, 144, 48, True, hs, 1),
        (5, 288, 96, True, hs, 2),
        (5, 576, 96, True, hs, 1),
        (5, 576, 96, True, hs, 1),
    ):
        layers.append(
            InvertedResidual(cin, cout, k, s, hidden, act, round8(hidden / 4) if se else 0, nn.ReLU, nn.Hardsigmoid)
        )
        cin = cout
    layers.append(conv_bn(cin, 576, act=hs))
    head = nn.Sequential(nn.Linear(576, 1024), hs(), nn.Dropout(0.2), nn.Linear(1024, 1000))
    return classifier(nn.Sequential(*layers), 576, head)


def efficientnet_b0() -> nn.Module:
    layers, cin = [conv_bn(3, 32, 3, 2, act=nn.SiLU)], 32
    for t, k, s, cout, n in (
        (1, 3, 1, 16, 1),
        (6, 3, 2, 24, 2),
        (6, 5, 2, 40, 2),
        (6, 3, 2, 80, 3),
        (6, 5, 1, 112, 3),
        (6, 5, 2, 192, 4),
        (6, 3, 1, 320, 1),
    ):
        for i in range(n):  # squeeze to a quarter of the block's input channels
            layers.append(
                InvertedResidual(cin, cout, k, s if i == 0 else 1, cin * t, nn.SiLU, max(1, cin // 4), nn.SiLU)
            )
            cin = cout
    layers.append(conv_bn(cin, 1280, act=nn.SiLU))
    return classifier(nn.Sequential(*layers), 1280, nn.Sequential(nn.Dropout(0.2), nn.Linear(1280, 1000)))


def mnasnet() -> nn.Module:
    layers = [conv_bn(3, 32, 3, 2), conv_bn(32, 32, 3, groups=32), conv_bn(32, 16, act=None)]
    cin = 16
    for cout, k, s, t, n in (
        (24, 3, 2, 3, 3),
        (40, 5, 2, 3, 3),
        (80, 5, 2, 6, 3),
        (96, 3, 1, 6, 2),
        (192, 5, 2, 6, 4),
        (320, 3, 1, 6, 1),
    ):
        for i in range(n):
            layers.append(InvertedResidual(cin, cout, k, s if i == 0 else 1, cin * t, nn.ReLU))
            cin = cout
    layers.append(conv_bn(cin, 1280))
    return classifier(nn.Sequential(*layers), 1280)


class ShuffleBlock(nn.Module):
    """ShuffleNet v2 unit: split (or duplicate, when downsampling), two branches, concatenate, shuffle."""

    def __init__(self, cin: int, cout: int, stride: int):
        super().__init__()
        half = cout // 2
        self.stride = stride
        self.left = (
            nn.Sequential(conv_bn(cin, cin, 3, stride, groups=cin, act=None), conv_bn(cin, half))
            if stride > 1
            else None
        )
        right_in = cin if stride > 1 else half
        self.right = nn.Sequential(
            conv_bn(right_in, half), conv_bn(half, half, 3, stride, groups=half, act=None), conv_bn(half, half)
        )

    def forward(self, x):
        if self.stride == 1:
            a, b = x.chunk(2, dim=1)
            y = torch.cat((a, self.right(b)), 1)
        else:
            y = torch.cat((self.left(x), self.right(x)), 1)
        n, c, h, w = y.shape
        return y.view(n, 2, c // 2, h, w).transpose(1, 2).reshape(n, c, h, w)


def shufflenet_v2() -> nn.Module:
    layers, cin = [conv_bn(3, 24, 3, 2), nn.MaxPool2d(3, 2, 1)], 24
    for cout, n in ((116, 4), (232, 8), (464, 4)):
        for i in range(n):
            layers.append(ShuffleBlock(cin, cout, 2 if i == 0 else 1))
            cin = cout
    layers.append(conv_bn(cin, 1024))
    return classifier(nn.Sequential(*layers), 1024)


class Fire(nn.Module):
    def __init__(self, cin: int, squeeze: int, expand: int):
        super().__init__()
        self.squeeze = nn.Sequential(nn.Conv2d(cin, squeeze, 1), nn.ReLU())
        self.e1 = nn.Sequential(nn.Conv2d(squeeze, expand, 1), nn.ReLU())
        self.e3 = nn.Sequential(nn.Conv2d(squeeze, expand, 3, padding=1), nn.ReLU())

    def forward(self, x):
        s = self.squeeze(x)
        return torch.cat((self.e1(s), self.e3(s)), 1)


def squeezenet() -> nn.Module:
    pool = lambda: nn.MaxPool2d(3, 2, ceil_mode=True)  # noqa: E731
    features = nn.Sequential(
        nn.Conv2d(3, 64, 3, 2),
        nn.ReLU(),
        pool(),
        Fire(64, 16, 64),
        Fire(128, 16, 64),
        pool(),
        Fire(128, 32, 128),
        Fire(256, 32, 128),
        pool(),
        Fire(256, 48, 192),
        Fire(384, 48, 192),
        Fire(384, 64, 256),
        Fire(512, 64, 256),
    )
    return nn.Sequential(
        features, nn.Dropout(0.5), nn.Conv2d(512, 1000, 1), nn.ReLU(), nn.AdaptiveAvgPool2d(1), nn.Flatten()
    )


class BasicBlock(nn.Module):
    def __init__(self, cin: int, cout: int, stride: int):
        super().__init__()
        self.body = nn.Sequential(conv_bn(cin, cout, 3, stride), conv_bn(cout, cout, 3, act=None))
        self.short = conv_bn(cin, cout, 1, stride, act=None) if stride > 1 or cin != cout else nn.Identity()

    def forward(self, x):
        return torch.relu(self.body(x) + self.short(x))


def resnet18() -> nn.Module:
    layers, cin = [conv_bn(3, 64, 7, 2), nn.MaxPool2d(3, 2, 1)], 64
    for cout, s in ((64, 1), (128, 2), (256, 2), (512, 2)):
        layers += [BasicBlock(cin, cout, s), BasicBlock(cout, cout, 1)]
        cin = cout
    return classifier(nn.Sequential(*layers), 512)
