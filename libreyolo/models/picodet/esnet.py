"""ESNet (Enhanced ShuffleNet), the PicoDet backbone: ShuffleNetV2-style blocks with a
squeeze-excitation gate, a ghost-like depthwise branch and channel shuffle.

Every block maps Tensor[B, c1, H, W] -> Tensor[B, c2, H / s, W / s] with static shapes and no
data-dependent control flow (CUDA-graph capturable). Activations are hard-swish as the
reference configs (``act: hard_swish``); the depthwise convs of the blocks have none.
"""

from __future__ import annotations

import torch
from torch import Tensor, nn

from ...layers.conv import ConvBNAct
from .variants import ESNET_REPEATS, PicoDetVariant, make_divisible

STEM_CHANNELS = 24


def hswish() -> nn.Module:
    """The hard-swish activation of every PicoDet block (``x * relu6(x + 3) / 6``)."""
    return nn.Hardswish()


def channel_shuffle(x: Tensor, groups: int) -> Tensor:
    """Interleave the channels of ``groups`` equal groups (ShuffleNet).

    x (Tensor[B, C, H, W]) -> (Tensor[B, C, H, W]); channel ``g * (C / groups) + i`` moves to
    ``i * groups + g``.

    Example:
        >>> channel_shuffle(torch.arange(4.0).view(1, 4, 1, 1), 2).flatten().tolist()
        [0.0, 2.0, 1.0, 3.0]
    """
    b, c, h, w = x.shape
    return x.view(b, groups, c // groups, h, w).transpose(1, 2).reshape(b, c, h, w)


class SEModule(nn.Module):
    """Squeeze-excitation gate: ``x * hardsigmoid(fc2(relu(fc1(avgpool(x)))))``, reduction 4,
    1x1 convs with bias. x (Tensor[B, c, H, W]) -> (Tensor[B, c, H, W])."""

    def __init__(self, c: int, reduction: int = 4) -> None:
        super().__init__()
        self.pool = nn.AdaptiveAvgPool2d(1)
        self.conv1 = nn.Conv2d(c, c // reduction, 1)
        self.act = nn.ReLU(inplace=True)
        self.conv2 = nn.Conv2d(c // reduction, c, 1)
        self.gate = nn.Hardsigmoid()

    def forward(self, x: Tensor) -> Tensor:
        return x * self.gate(self.conv2(self.act(self.conv1(self.pool(x)))))


class ESBlock(nn.Module):
    """Stride-1 ES block: split the channels in halves; the second half goes 1x1 (to
    ``mid / 2``) -> 3x3 depthwise, the two results are concatenated (ghost style), gated by
    :class:`SEModule` and projected 1x1 to ``c / 2``; concatenated with the untouched half and
    channel-shuffled. x (Tensor[B, c, H, W]) -> (Tensor[B, c, H, W]).

    Example:
        >>> ESBlock(96, 48)(torch.zeros(1, 96, 8, 8)).shape
        torch.Size([1, 96, 8, 8])
    """

    def __init__(self, c: int, mid: int) -> None:
        super().__init__()
        self.pw = ConvBNAct(c // 2, mid // 2, 1, act=hswish())
        self.dw = ConvBNAct(mid // 2, mid // 2, 3, 1, g=mid // 2, act=False)
        self.se = SEModule(mid)
        self.linear = ConvBNAct(mid, c // 2, 1, act=hswish())

    def forward(self, x: Tensor) -> Tensor:
        x1, x2 = x.chunk(2, dim=1)
        y = self.pw(x2)
        y = self.linear(self.se(torch.cat((y, self.dw(y)), 1)))
        return channel_shuffle(torch.cat((x1, y), 1), 2)


class ESBlockDS(nn.Module):
    """Stride-2 ES block. Branch 1: 3x3 depthwise stride 2 -> 1x1 to ``c2 / 2``; branch 2: 1x1
    to ``mid / 2`` -> 3x3 depthwise stride 2 -> SE -> 1x1 to ``c2 / 2``; the concatenation is
    fused by a 3x3 depthwise + 1x1 pair (both hard-swish).
    x (Tensor[B, c1, H, W]) -> (Tensor[B, c2, ceil(H / 2), ceil(W / 2)]).

    Example:
        >>> ESBlockDS(24, 56, 96)(torch.zeros(1, 24, 16, 16)).shape
        torch.Size([1, 96, 8, 8])
    """

    def __init__(self, c1: int, mid: int, c2: int) -> None:
        super().__init__()
        self.dw1 = ConvBNAct(c1, c1, 3, 2, g=c1, act=False)
        self.linear1 = ConvBNAct(c1, c2 // 2, 1, act=hswish())
        self.pw2 = ConvBNAct(c1, mid // 2, 1, act=hswish())
        self.dw2 = ConvBNAct(mid // 2, mid // 2, 3, 2, g=mid // 2, act=False)
        self.se = SEModule(mid // 2)
        self.linear2 = ConvBNAct(mid // 2, c2 // 2, 1, act=hswish())
        self.dw_mix = ConvBNAct(c2, c2, 3, 1, g=c2, act=hswish())
        self.pw_mix = ConvBNAct(c2, c2, 1, act=hswish())

    def forward(self, x: Tensor) -> Tensor:
        a = self.linear1(self.dw1(x))
        b = self.linear2(self.se(self.dw2(self.pw2(x))))
        return self.pw_mix(self.dw_mix(torch.cat((a, b), 1)))


class ESNet(nn.Module):
    """ESNet of one PicoDet size: 3x3 stride-2 stem (24 channels, hard-swish), 3x3 stride-2 max
    pool, then three stages of (one :class:`ESBlockDS`, then :class:`ESBlock`) with 3, 7, 3
    blocks; block ``i``'s middle width is ``make_divisible(int(stage width * ratio[i]), 8)``.

    x (Tensor[B, 3, H, W]) -> (C3, C4, C5), strides 8, 16, 32, with ``out_channels`` channels.
    """

    def __init__(self, variant: PicoDetVariant) -> None:
        super().__init__()
        self.stem = ConvBNAct(3, STEM_CHANNELS, 3, 2, act=hswish())
        self.pool = nn.MaxPool2d(3, 2, 1)
        c_in, idx = STEM_CHANNELS, 0
        stages = []
        for c, n in zip(variant.stage_channels, ESNET_REPEATS, strict=True):
            blocks: list[nn.Module] = []
            for i in range(n):
                mid = make_divisible(int(c * variant.channel_ratio[idx]), divisor=8)
                blocks.append(ESBlockDS(c_in, mid, c) if i == 0 else ESBlock(c, mid))
                idx += 1
            stages.append(nn.Sequential(*blocks))
            c_in = c
        self.stage2, self.stage3, self.stage4 = stages
        self.out_channels = variant.stage_channels

    def forward(self, x: Tensor) -> tuple[Tensor, Tensor, Tensor]:
        c3 = self.stage2(self.pool(self.stem(x)))
        c4 = self.stage3(c3)
        return c3, c4, self.stage4(c4)
