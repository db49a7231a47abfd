"""NAFNet: a U-Net of activation-free blocks that predicts the residual of a degraded image.

A :class:`NAFBlock` on ``c`` channels is two residual halves, each scaled by a learnable
per-channel factor that starts at zero (``beta``, ``gamma``), so a fresh block is the identity:

- spatial half: LayerNorm over channels -> 1x1 conv to ``2c`` -> 3x3 depthwise conv ->
  :func:`simple_gate` (split the channels in two halves, multiply them: ``c`` channels) ->
  simplified channel attention (``x * conv1x1(global average pool(x))``) -> 1x1 conv to ``c``;
- feed-forward half: LayerNorm -> 1x1 conv to ``2c`` -> simple gate -> 1x1 conv to ``c``.

:class:`NAFNet`: a 3x3 stem to ``width`` channels, encoder levels (blocks, then a 2x2 stride-2
conv that doubles the channels), middle blocks, decoder levels (1x1 conv to twice the channels
+ pixel shuffle x2, the encoder's skip added, blocks), a 3x3 conv to 3 channels, and the input
added back: ``out = x + net(x)``. H and W must be multiples of ``2 ** levels`` (16 for four
levels); prediction pads to that multiple (:mod:`libreyolo.tasks.restore`).
"""

from __future__ import annotations

from dataclasses import dataclass

import torch
from torch import Tensor, nn


@dataclass(frozen=True)
class NAFNetSpec:
    """Width and block counts: ``enc`` per encoder level, ``middle``, ``dec`` per decoder level."""

    width: int
    enc: tuple[int, ...]
    middle: int
    dec: tuple[int, ...]


SPECS: dict[str, NAFNetSpec] = {
    # libreyolo's small size for CPU demos and tests (not a published configuration)
    "t": NAFNetSpec(width=16, enc=(1, 1, 1, 1), middle=1, dec=(1, 1, 1, 1)),
    # the SIDD denoising configuration of the paper (NAFNet-SIDD-width32)
    "w32": NAFNetSpec(width=32, enc=(2, 2, 4, 8), middle=12, dec=(2, 2, 2, 2)),
}


class LayerNorm2d(nn.Module):
    """LayerNorm over the channel axis of Tensor[B, C, H, W], per pixel (eps 1e-6), with a
    per-channel scale and shift. Statistics are computed in float32."""

    def __init__(self, channels: int, eps: float = 1e-6) -> None:
        super().__init__()
        self.weight = nn.Parameter(torch.ones(channels))
        self.bias = nn.Parameter(torch.zeros(channels))
        self.eps = eps

    def forward(self, x: Tensor) -> Tensor:
        xf = x.float()
        mu = xf.mean(1, keepdim=True)
        var = (xf - mu).pow(2).mean(1, keepdim=True)
        y = ((xf - mu) * torch.rsqrt(var + self.eps)).to(x.dtype)
        return y * self.weight.view(1, -1, 1, 1).to(x.dtype) + self.bias.view(1, -1, 1, 1).to(x.dtype)


def simple_gate(x: Tensor) -> Tensor:
    """Split the channels in two halves and multiply them: Tensor[B, 2C, ...] -> Tensor[B, C, ...].

    Example:
        >>> simple_gate(torch.tensor([[[[2.0]], [[3.0]]]])).flatten().tolist()
        [6.0]
    """
    a, b = x.chunk(2, dim=1)
    return a * b


class NAFBlock(nn.Module):
    """The activation-free block (module docstring); ``expand`` = 2 in both halves, as in the paper."""

    def __init__(self, c: int, expand: int = 2) -> None:
        super().__init__()
        dw = c * expand
        self.norm1 = LayerNorm2d(c)
        self.pw1 = nn.Conv2d(c, dw, 1)
        self.dw = nn.Conv2d(dw, dw, 3, padding=1, groups=dw)
        self.pool = nn.AdaptiveAvgPool2d(1)
        self.sca = nn.Conv2d(dw // 2, dw // 2, 1)
        self.pw2 = nn.Conv2d(dw // 2, c, 1)
        self.norm2 = LayerNorm2d(c)
        self.ffn1 = nn.Conv2d(c, c * expand, 1)
        self.ffn2 = nn.Conv2d(c * expand // 2, c, 1)
        self.beta = nn.Parameter(torch.zeros(1, c, 1, 1))
        self.gamma = nn.Parameter(torch.zeros(1, c, 1, 1))

    def forward(self, x: Tensor) -> Tensor:
        y = simple_gate(self.dw(self.pw1(self.norm1(x))))
        y = self.pw2(y * self.sca(self.pool(y)))
        x = x + y * self.beta
        y = self.ffn2(simple_gate(self.ffn1(self.norm2(x))))
        return x + y * self.gamma


class NAFNet(nn.Module):
    """Tensor[B, 3, H, W] float in [0, 1] (H, W multiples of :attr:`multiple`) -> the restored
    image Tensor[B, 3, H, W] (not clamped), in train and eval mode alike."""

    def __init__(self, spec: NAFNetSpec) -> None:
        super().__init__()
        if len(spec.enc) != len(spec.dec):
            raise ValueError(f"NAFNet needs as many decoder as encoder levels, got {spec.enc} and {spec.dec}")
        c = spec.width
        self.stem = nn.Conv2d(3, c, 3, padding=1)
        self.enc, self.down = nn.ModuleList(), nn.ModuleList()
        for n in spec.enc:
            self.enc.append(nn.Sequential(*[NAFBlock(c) for _ in range(n)]))
            self.down.append(nn.Conv2d(c, 2 * c, 2, stride=2))
            c *= 2
        self.mid = nn.Sequential(*[NAFBlock(c) for _ in range(spec.middle)])
        self.up, self.dec = nn.ModuleList(), nn.ModuleList()
        for n in spec.dec:
            self.up.append(nn.Sequential(nn.Conv2d(c, 2 * c, 1, bias=False), nn.PixelShuffle(2)))
            c //= 2
            self.dec.append(nn.Sequential(*[NAFBlock(c) for _ in range(n)]))
        self.head = nn.Conv2d(c, 3, 3, padding=1)
        self.multiple = 2 ** len(spec.enc)

    def forward(self, x: Tensor) -> Tensor:
        h = self.stem(x)
        skips = []
        for blocks, down in zip(self.enc, self.down, strict=True):
            h = blocks(h)
            skips.append(h)
            h = down(h)
        h = self.mid(h)
        for up, blocks, skip in zip(self.up, self.dec, reversed(skips), strict=True):
            h = blocks(up(h) + skip)
        return x + self.head(h)


def build_nafnet(*, size: str) -> NAFNet:
    """The NAFNet of ``size`` (:data:`SPECS`).

    Example:
        >>> net = build_nafnet(size="t")
        >>> net(torch.rand(1, 3, 32, 48)).shape
        torch.Size([1, 3, 32, 48])
    """
    return NAFNet(SPECS[size])
