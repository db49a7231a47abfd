"""PP-LCNetV3 trunk of PP-OCRv4 (detection and recognition variants) with re-parameterisable layers.

Structure as PaddleOCR's ``ppocr/modeling/backbones/rec_lcnetv3.py`` describes it (read for layer
order and channel arithmetic; this is our own code): a 3x3 stride-2 conv + BN stem, then five
stages of depthwise-separable blocks whose two convolutions are :class:`RepLayer` s (four kxk
conv-BN branches, a 1x1 conv-BN branch and an identity BN during training, summed, then a
learnable scalar affine; a Hardswish + affine after it unless the stride is 2). ``fuse()`` folds the
branches into one biased convolution, the deployed form the published inference models hold.
"""

from __future__ import annotations

import torch
import torch.nn.functional as F
from torch import Tensor, nn

# k, in_c, out_c, stride, use_se per block (the channel counts are scaled, then rounded to 16)
DET_STAGES: tuple[tuple[tuple[int, int, int, int | tuple[int, int], bool], ...], ...] = (
    ((3, 16, 32, 1, False),),
    ((3, 32, 64, 2, False), (3, 64, 64, 1, False)),
    ((3, 64, 128, 2, False), (3, 128, 128, 1, False)),
    ((3, 128, 256, 2, False),) + ((5, 256, 256, 1, False),) * 4,
    ((5, 256, 512, 2, True), (5, 512, 512, 1, True), (5, 512, 512, 1, False), (5, 512, 512, 1, False)),
)
REC_STAGES: tuple[tuple[tuple[int, int, int, int | tuple[int, int], bool], ...], ...] = (
    ((3, 16, 32, 1, False),),
    ((3, 32, 64, 1, False), (3, 64, 64, 1, False)),
    ((3, 64, 128, (2, 1), False), (3, 128, 128, 1, False)),
    ((3, 128, 256, (1, 2), False),) + ((5, 256, 256, 1, False),) * 4,
    ((5, 256, 512, (2, 1), True), (5, 512, 512, 1, True), (5, 512, 512, (2, 1), False), (5, 512, 512, 1, False)),
)
DET_TAPS = (16, 24, 56, 480)  # the 1x1 projections of the four detection taps (times the scale)


def make_divisible(v: float, divisor: int = 16) -> int:
    """Round a scaled channel count to a multiple of ``divisor`` (never below it, never 10 % down).

    Example:
        >>> make_divisible(512 * 0.95), make_divisible(16 * 0.75)
        (480, 16)
    """
    new = max(divisor, int(v + divisor / 2) // divisor * divisor)
    return new + divisor if new < 0.9 * v else new


class Affine(nn.Module):
    """``scale * x + bias`` with two learnable scalars (PaddleOCR's LearnableAffineBlock)."""

    def __init__(self) -> None:
        super().__init__()
        self.scale = nn.Parameter(torch.ones(1))
        self.bias = nn.Parameter(torch.zeros(1))

    def forward(self, x: Tensor) -> Tensor:
        return self.scale * x + self.bias


class HswishAffine(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.lab = Affine()

    def forward(self, x: Tensor) -> Tensor:
        return self.lab(F.hardswish(x))


class ConvBN(nn.Module):
    """Conv (no bias) + BatchNorm, no activation."""

    def __init__(self, cin: int, cout: int, k: int, stride: int | tuple[int, int] = 1, groups: int = 1) -> None:
        super().__init__()
        self.conv = nn.Conv2d(cin, cout, k, stride, (k - 1) // 2, groups=groups, bias=False)
        self.bn = nn.BatchNorm2d(cout)

    def forward(self, x: Tensor) -> Tensor:
        return self.bn(self.conv(x))


def _fold(kernel: Tensor, bn: nn.BatchNorm2d) -> tuple[Tensor, Tensor]:
    std = (bn.running_var + bn.eps).sqrt()
    t = bn.weight / std
    return kernel * t.reshape(-1, 1, 1, 1), bn.bias - bn.running_mean * t


class RepLayer(nn.Module):
    """Training: identity BN + 1x1 conv-BN + ``branches`` kxk conv-BN, summed, scalar affine, then
    Hardswish + affine unless ``stride == 2``. Fused: one biased kxk conv in their place."""

    def __init__(self, cin: int, cout: int, k: int, stride: int | tuple[int, int] = 1, groups: int = 1,
                 branches: int = 4) -> None:
        super().__init__()
        self.cin, self.cout, self.k, self.stride, self.groups = cin, cout, k, stride, groups
        self.identity = nn.BatchNorm2d(cin) if cin == cout and stride == 1 else None
        self.conv_kxk = nn.ModuleList(ConvBN(cin, cout, k, stride, groups) for _ in range(branches))
        self.conv_1x1 = ConvBN(cin, cout, 1, stride, groups) if k > 1 else None
        self.reparam: nn.Conv2d | None = None
        self.lab = Affine()
        self.act = HswishAffine() if stride != 2 else None

    def forward(self, x: Tensor) -> Tensor:
        if self.reparam is not None:
            out = self.reparam(x)
        else:
            out = self.conv_kxk[0](x)
            for conv in self.conv_kxk[1:]:
                out = out + conv(x)
            if self.conv_1x1 is not None:
                out = out + self.conv_1x1(x)
            if self.identity is not None:
                out = out + self.identity(x)
        out = self.lab(out)
        return self.act(out) if self.act is not None else out

    @torch.no_grad()
    def fuse(self) -> None:
        if self.reparam is not None:
            return
        kernel, bias = 0, 0
        for conv in self.conv_kxk:
            kk, bb = _fold(conv.conv.weight, conv.bn)
            kernel, bias = kernel + kk, bias + bb
        if self.conv_1x1 is not None:
            kk, bb = _fold(self.conv_1x1.conv.weight, self.conv_1x1.bn)
            p = self.k // 2
            kernel, bias = kernel + F.pad(kk, [p, p, p, p]), bias + bb
        if self.identity is not None:
            per = self.cin // self.groups
            eye = torch.zeros(self.cin, per, self.k, self.k, device=self.identity.weight.device)
            eye[torch.arange(self.cin), torch.arange(self.cin) % per, self.k // 2, self.k // 2] = 1
            kk, bb = _fold(eye, self.identity)
            kernel, bias = kernel + kk, bias + bb
        conv = nn.Conv2d(self.cin, self.cout, self.k, self.stride, (self.k - 1) // 2, groups=self.groups, bias=True)
        conv = conv.to(self.lab.scale.device)
        conv.weight.copy_(kernel)
        conv.bias.copy_(bias)
        self.reparam = conv
        self.conv_kxk, self.conv_1x1, self.identity = nn.ModuleList(), None, None


class SE(nn.Module):
    """Squeeze-excitation: mean -> 1x1 (c/4) -> ReLU -> 1x1 (c) -> hard sigmoid (``slope`` x + 0.5) -> x * w."""

    def __init__(self, c: int, slope: float = 1 / 6) -> None:
        super().__init__()
        self.conv1 = nn.Conv2d(c, c // 4, 1)
        self.conv2 = nn.Conv2d(c // 4, c, 1)
        self.slope = slope

    def forward(self, x: Tensor) -> Tensor:
        w = self.conv2(F.relu(self.conv1(x.mean((2, 3), keepdim=True))))
        w = F.hardsigmoid(w) if self.slope == 1 / 6 else (w * self.slope + 0.5).clamp(0.0, 1.0)
        return x * w


class Block(nn.Module):
    def __init__(self, cin: int, cout: int, stride: int | tuple[int, int], k: int, se: bool) -> None:
        super().__init__()
        self.dw_conv = RepLayer(cin, cin, k, stride, groups=cin)
        self.se = SE(cin) if se else None
        self.pw_conv = RepLayer(cin, cout, 1)

    def forward(self, x: Tensor) -> Tensor:
        x = self.dw_conv(x)
        if self.se is not None:
            x = self.se(x)
        return self.pw_conv(x)


class LCNetV3(nn.Module):
    """PP-LCNetV3. ``det=True``: four taps at strides 4, 8, 16, 32, each projected by a biased 1x1
    conv (``out_channels`` of them); ``det=False``: the recognition trunk (strides (2, 1) / (1, 2)
    keep the width), ending in a 3x2 average pool: Tensor[B, C, 1, W/8] for a 48-pixel-high input."""

    def __init__(self, scale: float, *, det: bool) -> None:
        super().__init__()
        self.det = det
        cfg = DET_STAGES if det else REC_STAGES
        self.conv1 = ConvBN(3, make_divisible(16 * scale), 3, 2)
        self.stages = nn.ModuleList(
            nn.Sequential(*(Block(make_divisible(i * scale), make_divisible(o * scale), s, k, se)
                            for k, i, o, s, se in stage)) for stage in cfg)
        if det:
            taps = [make_divisible(stage[-1][2] * scale) for stage in cfg[1:]]
            self.proj = nn.ModuleList(nn.Conv2d(c, int(m * scale), 1) for c, m in zip(taps, DET_TAPS, strict=True))
            self.out_channels: list[int] | int = [int(m * scale) for m in DET_TAPS]
        else:
            self.out_channels = make_divisible(512 * scale)

    def forward(self, x: Tensor) -> list[Tensor] | Tensor:
        x = self.stages[0](self.conv1(x))
        taps = []
        for stage in self.stages[1:]:
            x = stage(x)
            taps.append(x)
        if self.det:
            return [p(t) for p, t in zip(self.proj, taps, strict=True)]
        return F.avg_pool2d(x, (3, 2))

    def fuse(self) -> None:
        for m in self.modules():
            if isinstance(m, RepLayer):
                m.fuse()
