"""RRDBNet, the generator of ESRGAN and Real-ESRGAN: x4 super-resolution.

- :class:`DenseBlock` (residual dense block): five 3x3 convs, each fed the concatenation of the
  block input and every earlier conv's output (``feat`` + k * ``grow`` channels); the first four
  grow ``grow`` channels with LeakyReLU(0.2), the fifth returns to ``feat``; out = x + 0.2 * y.
- :class:`RRDB`: three dense blocks in a chain, out = x + 0.2 * chain(x).
- :class:`RRDBNet`: a 3x3 conv to ``feat`` channels, ``blocks`` RRDBs and a 3x3 conv with a long
  skip around them, then two times (nearest-neighbour upsampling x2, 3x3 conv, LeakyReLU), a 3x3
  conv with LeakyReLU and a 3x3 conv to 3 channels: Tensor[B, 3, H, W] -> Tensor[B, 3, 4H, 4W].

Initialisation: the dense blocks' convolutions He-normal scaled by 0.1 with zero biases (the
residual scaling of the ESRGAN paper); the other convolutions keep PyTorch's default.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch
import torch.nn.functional as F
from torch import Tensor, nn


@dataclass(frozen=True)
class RRDBSpec:
    blocks: int
    feat: int = 64
    grow: int = 32
    scale: int = 4


SPECS: dict[str, RRDBSpec] = {
    "x4b6": RRDBSpec(blocks=6),  # the 6-block generator of Real-ESRGAN's x4 anime model
    "x4": RRDBSpec(blocks=23),  # ESRGAN / Real-ESRGAN x4plus
}


def _lrelu(x: Tensor) -> Tensor:
    return F.leaky_relu(x, 0.2)


class DenseBlock(nn.Module):
    def __init__(self, feat: int, grow: int) -> None:
        super().__init__()
        self.convs = nn.ModuleList(nn.Conv2d(feat + i * grow, grow if i < 4 else feat, 3, padding=1)
                                   for i in range(5))

    def forward(self, x: Tensor) -> Tensor:
        feats = [x]
        for conv in self.convs[:4]:
            feats.append(_lrelu(conv(torch.cat(feats, 1))))
        return x + 0.2 * self.convs[4](torch.cat(feats, 1))


class RRDB(nn.Module):
    def __init__(self, feat: int, grow: int) -> None:
        super().__init__()
        self.dense = nn.Sequential(*[DenseBlock(feat, grow) for _ in range(3)])

    def forward(self, x: Tensor) -> Tensor:
        return x + 0.2 * self.dense(x)


class RRDBNet(nn.Module):
    """Tensor[B, 3, H, W] float in [0, 1] -> Tensor[B, 3, 4H, 4W] (not clamped), any H, W."""

    multiple = 1

    def __init__(self, spec: RRDBSpec) -> None:
        super().__init__()
        if spec.scale != 4:
            raise ValueError(f"RRDBNet here upsamples x4 only, got scale {spec.scale}")
        f = spec.feat
        self.stem = nn.Conv2d(3, f, 3, padding=1)
        self.body = nn.Sequential(*[RRDB(f, spec.grow) for _ in range(spec.blocks)])
        self.body_conv = nn.Conv2d(f, f, 3, padding=1)
        self.up1 = nn.Conv2d(f, f, 3, padding=1)
        self.up2 = nn.Conv2d(f, f, 3, padding=1)
        self.hr = nn.Conv2d(f, f, 3, padding=1)
        self.out = nn.Conv2d(f, 3, 3, padding=1)
        self.scale = spec.scale
        for m in self.body.modules():  # the dense blocks' convs; the others keep PyTorch's default
            if isinstance(m, nn.Conv2d):
                nn.init.kaiming_normal_(m.weight)
                m.weight.data.mul_(0.1)
                nn.init.zeros_(m.bias)

    def forward(self, x: Tensor) -> Tensor:
        h = self.stem(x)
        h = h + self.body_conv(self.body(h))
        h = _lrelu(self.up1(F.interpolate(h, scale_factor=2.0, mode="nearest")))
        h = _lrelu(self.up2(F.interpolate(h, scale_factor=2.0, mode="nearest")))
        return self.out(_lrelu(self.hr(h)))


def build_rrdbnet(*, size: str) -> RRDBNet:
    """The RRDBNet of ``size`` (:data:`SPECS`).

    Example:
        >>> build_rrdbnet(size="x4b6")(torch.rand(1, 3, 8, 12)).shape
        torch.Size([1, 3, 32, 48])
    """
    return RRDBNet(SPECS[size])
