"""ResNet-vd backbone (He et al., "Bag of Tricks", variant D), as used by RT-DETR / RT-DETRv2.

Variant D differs from the plain ResNet in two places:

* stem: three 3x3 convs (3->c/2 stride 2, c/2->c/2, c/2->c) instead of one 7x7, then a 3x3
  stride-2 max-pool;
* down-sampling shortcut: a 2x2 stride-2 average pool followed by a 1x1 conv, instead of a
  strided 1x1 conv; the Bottleneck puts its stride on the 3x3 conv.

Depths 18 and 34 use BasicBlock (expansion 1), 50 and 101 Bottleneck (expansion 4). As the
reference, the first block of every stage has a projection shortcut (even when the widths match).

forward(x): x (Tensor[B, 3, H, W]) -> list of Tensor[B, C_i, H / s_i, W / s_i] for the stages
in ``return_idx`` (default strides 8, 16, 32).
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import ClassVar

import torch  # noqa: F401 - used by the doctest
from torch import Tensor, nn

from ...errors import ConfigError
from .common import conv_norm

DEPTHS: dict[int, tuple[int, int, int, int]] = {
    18: (2, 2, 2, 2), 34: (3, 4, 6, 3), 50: (3, 4, 6, 3), 101: (3, 4, 23, 3),
}
STAGE_MULT = (1, 2, 4, 8)


class _Shortcut(nn.Module):
    """Projection shortcut: avg-pool 2x2 + 1x1 conv when strided (variant D), else 1x1 conv."""

    def __init__(self, c1: int, c2: int, stride: int) -> None:
        super().__init__()
        self.pool = nn.AvgPool2d(2, 2, 0, ceil_mode=True) if stride == 2 else nn.Identity()
        self.conv = conv_norm(c1, c2, 1, 1)

    def forward(self, x: Tensor) -> Tensor:
        return self.conv(self.pool(x))


class BasicBlock(nn.Module):
    expansion: ClassVar[int] = 1

    def __init__(self, c1: int, c2: int, *, stride: int, project: bool) -> None:
        super().__init__()
        self.short = _Shortcut(c1, c2, stride) if project else None
        self.branch2a = conv_norm(c1, c2, 3, stride, act=nn.ReLU(inplace=True))
        self.branch2b = conv_norm(c2, c2, 3, 1)
        self.act = nn.ReLU(inplace=True)

    def forward(self, x: Tensor) -> Tensor:
        y = self.branch2b(self.branch2a(x))
        return self.act(y + (x if self.short is None else self.short(x)))


class Bottleneck(nn.Module):
    expansion: ClassVar[int] = 4

    def __init__(self, c1: int, c2: int, *, stride: int, project: bool) -> None:
        super().__init__()
        out = c2 * self.expansion
        self.short = _Shortcut(c1, out, stride) if project else None
        self.branch2a = conv_norm(c1, c2, 1, 1, act=nn.ReLU(inplace=True))
        self.branch2b = conv_norm(c2, c2, 3, stride, act=nn.ReLU(inplace=True))
        self.branch2c = conv_norm(c2, out, 1, 1)
        self.act = nn.ReLU(inplace=True)

    def forward(self, x: Tensor) -> Tensor:
        y = self.branch2c(self.branch2b(self.branch2a(x)))
        return self.act(y + (x if self.short is None else self.short(x)))


class ResNetVd(nn.Module):
    """ResNet-vd feature extractor.

    Args:
        depth: 18, 34, 50 or 101.
        return_idx: stage indices to return (0 = stride 4 ... 3 = stride 32).
        width: channels of the first stage (64 in every published model; smaller values give
            narrow networks for tests). Stages are ``width * (1, 2, 4, 8)``, the stem
            ``width / 2, width / 2, width``.

    Attributes:
        out_channels (tuple[int, ...]): channels of the returned maps.
        out_strides (tuple[int, ...]): their strides.

    Example:
        >>> net = ResNetVd(depth=18)
        >>> [tuple(f.shape) for f in net(torch.zeros(1, 3, 64, 64))]
        [(1, 128, 8, 8), (1, 256, 4, 4), (1, 512, 2, 2)]
    """

    def __init__(self, *, depth: int = 50, return_idx: Sequence[int] = (1, 2, 3), width: int = 64) -> None:
        super().__init__()
        if depth not in DEPTHS:
            raise ConfigError(f"ResNet-vd depth must be one of {sorted(DEPTHS)}, got {depth!r}")
        block = BasicBlock if depth < 50 else Bottleneck
        relu = nn.ReLU(inplace=True)
        self.stem = nn.Sequential(
            conv_norm(3, width // 2, 3, 2, act=relu), conv_norm(width // 2, width // 2, 3, 1, act=relu),
            conv_norm(width // 2, width, 3, 1, act=relu), nn.MaxPool2d(3, 2, 1),
        )
        widths = tuple(width * m for m in STAGE_MULT)
        c_in = width
        stages = []
        for i, (n, w) in enumerate(zip(DEPTHS[depth], widths, strict=True)):
            blocks = []
            for j in range(n):
                stride = 2 if (j == 0 and i > 0) else 1
                blocks.append(block(c_in, w, stride=stride, project=j == 0))
                c_in = w * block.expansion
            stages.append(nn.Sequential(*blocks))
        self.stages = nn.ModuleList(stages)
        self.return_idx = tuple(int(i) for i in return_idx)
        self.out_channels = tuple(widths[i] * block.expansion for i in self.return_idx)
        self.out_strides = tuple(4 * 2**i for i in self.return_idx)

    def forward(self, x: Tensor) -> list[Tensor]:
        x = self.stem(x)
        outs = []
        for i, stage in enumerate(self.stages):
            x = stage(x)
            if i in self.return_idx:
                outs.append(x)
        return outs
