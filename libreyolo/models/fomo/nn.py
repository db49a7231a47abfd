"""FOMO network: MobileNetV2 cut at stride 8, then a per-cell classifier.

Backbone (width multiplier ``alpha``; channels ``make_divisible(c * alpha, 8)``):

===========================  ============  ======  ======  =======
block                        c_out (1.0)   expand  stride  repeats
===========================  ============  ======  ======  =======
conv 3x3 + BN + ReLU6        32                    2       1
inverted residual            16            1       1       1
inverted residual            24            6       2       2
inverted residual            32            6       2       3
cut: 1x1 expand + BN + ReLU6 192 (= 6x32)          1       1
===========================  ============  ======  ======  =======

The cut is the expansion of the first stride-16 block (Keras' ``block_6_expand_relu``, where
Edge Impulse's FOMO cuts), so the features stay at stride 8. Head: 1x1 conv to 32 channels with
ReLU, then a 1x1 conv to ``nc + 1`` logits (channel 0 = background).

Contract: Tensor[B, 3, H, W] float RGB in [0, 1] (H, W multiples of 8), standardised inside with
the ImageNet mean / std -> logits Tensor[B, nc + 1, H/8, W/8], train and eval mode alike.
"""

from __future__ import annotations

import torch
from torch import Tensor, nn

from ...layers.conv import fuse_conv_bn

WIDTHS = {"035": 0.35, "100": 1.0}
# (expand, c_out at width 1.0, repeats, first stride): MobileNetV2's stages up to stride 8
STAGES: tuple[tuple[int, int, int, int], ...] = ((1, 16, 1, 1), (6, 24, 2, 2), (6, 32, 3, 2))
CUT_EXPAND = 6  # the next block's expansion ratio (the cut keeps its 1x1 expand)
HEAD_CH = 32
IMAGENET_MEAN = (0.485, 0.456, 0.406)
IMAGENET_STD = (0.229, 0.224, 0.225)


def make_divisible(v: float, divisor: int = 8) -> int:
    """``v`` rounded to the nearest multiple of ``divisor`` (at least ``divisor``), never more than
    10 % below ``v``: MobileNetV2's channel rounding.

    Example:
        >>> make_divisible(32 * 0.35), make_divisible(24 * 0.35), make_divisible(32 * 1.0)
        (16, 8, 32)
    """
    out = max(divisor, int(v + divisor / 2) // divisor * divisor)
    if out < 0.9 * v:
        out += divisor
    return out


class ConvBN(nn.Module):
    """Conv2d (no bias) -> BatchNorm2d -> ReLU6 (or nothing); :meth:`fuse` folds the BatchNorm."""

    def __init__(self, c1: int, c2: int, k: int = 1, s: int = 1, *, groups: int = 1, act: bool = True) -> None:
        super().__init__()
        self.conv = nn.Conv2d(c1, c2, k, s, k // 2, groups=groups, bias=False)
        self.bn: nn.BatchNorm2d | None = nn.BatchNorm2d(c2)
        self.act: nn.Module = nn.ReLU6(inplace=True) if act else nn.Identity()

    def forward(self, x: Tensor) -> Tensor:
        x = self.conv(x)
        if self.bn is not None:
            x = self.bn(x)
        return self.act(x)

    def fuse(self) -> None:
        if self.bn is not None:
            self.conv = fuse_conv_bn(self.conv, self.bn)
            self.bn = None


class InvertedResidual(nn.Module):
    """1x1 expand (skipped at ratio 1), 3x3 depthwise, linear 1x1 projection; identity shortcut
    when the stride is 1 and the widths match."""

    def __init__(self, c1: int, c2: int, *, stride: int, expand: int) -> None:
        super().__init__()
        hidden = int(round(c1 * expand))
        self.expand = ConvBN(c1, hidden, 1) if expand != 1 else None
        self.dw = ConvBN(hidden, hidden, 3, stride, groups=hidden)
        self.project = ConvBN(hidden, c2, 1, act=False)
        self.residual = stride == 1 and c1 == c2

    def forward(self, x: Tensor) -> Tensor:
        y = self.expand(x) if self.expand is not None else x
        y = self.project(self.dw(y))
        return x + y if self.residual else y


class MobileNetV2Stride8(nn.Module):
    """MobileNetV2 up to stride 8 plus the cut expansion (module docstring); ``channels`` is the
    width of its output."""

    def __init__(self, alpha: float) -> None:
        super().__init__()
        c = make_divisible(32 * alpha)
        self.stem = ConvBN(3, c, 3, 2)
        blocks: list[nn.Module] = []
        for t, c_out, n, s in STAGES:
            c2 = make_divisible(c_out * alpha)
            for i in range(n):
                blocks.append(InvertedResidual(c, c2, stride=s if i == 0 else 1, expand=t))
                c = c2
        self.blocks = nn.Sequential(*blocks)
        self.cut = ConvBN(c, c * CUT_EXPAND, 1)
        self.channels = c * CUT_EXPAND

    def forward(self, x: Tensor) -> Tensor:
        return self.cut(self.blocks(self.stem(x)))


class FOMONet(nn.Module):
    """Tensor[B, 3, H, W] in [0, 1] -> logits Tensor[B, nc + 1, H/8, W/8] (channel 0: background).

    Example:
        >>> net = FOMONet(alpha=0.35, nc=2).eval()
        >>> net(torch.rand(1, 3, 64, 96)).shape
        torch.Size([1, 3, 8, 12])
    """

    stride = 8

    def __init__(self, *, alpha: float, nc: int) -> None:
        super().__init__()
        self.register_buffer("mean", torch.tensor(IMAGENET_MEAN).view(1, 3, 1, 1), persistent=False)
        self.register_buffer("std", torch.tensor(IMAGENET_STD).view(1, 3, 1, 1), persistent=False)
        self.backbone = MobileNetV2Stride8(alpha)
        self.head = nn.Sequential(nn.Conv2d(self.backbone.channels, HEAD_CH, 1), nn.ReLU(inplace=True),
                                  nn.Conv2d(HEAD_CH, nc + 1, 1))

    def forward(self, x: Tensor) -> Tensor:
        x = (x - self.mean.to(x.dtype)) / self.std.to(x.dtype)
        return self.head(self.backbone(x))

    def fuse(self) -> None:
        """Fold every BatchNorm into its convolution (inference only)."""
        for m in self.modules():
            if isinstance(m, ConvBN):
                m.fuse()


def build_fomo(*, size: str, nc: int) -> FOMONet:
    """The FOMO network of ``size`` ("035" or "100": the MobileNetV2 width multiplier x 100)."""
    return FOMONet(alpha=WIDTHS[size], nc=nc)
