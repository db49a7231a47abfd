"""CSPNeXt building blocks (RTMDet lineage): the large-kernel residual block, the channel
attention gate and the cross-stage-partial layer built from them.

Every block maps Tensor[B, c1, H, W] -> Tensor[B, c2, H, W] with static shapes and no
data-dependent control flow (CUDA-graph capturable). Submodule names follow the reference
CSPNeXt layout (``main_conv``, ``short_conv``, ``final_conv``, ``blocks``, ``attention``) so
reference checkpoints map by renaming only the ConvModule internals (``conv``/``bn`` are kept;
a depthwise-separable module's ``depthwise_conv``/``pointwise_conv`` become ``dconv``/``pconv``).
"""

from __future__ import annotations

import torch
from torch import Tensor, nn

from ...layers.conv import ConvBNAct
from ...layers.dwconv import DWConvBNAct


class ChannelAttention(nn.Module):
    """Squeeze-excitation style gate without reduction: ``x * hardsigmoid(fc(avgpool(x)))``.

    ``fc`` is a 1x1 conv with bias (c -> c). x (Tensor[B, c, H, W]) -> (Tensor[B, c, H, W]).
    """

    def __init__(self, c: int) -> None:
        super().__init__()
        self.pool = nn.AdaptiveAvgPool2d(1)
        self.fc = nn.Conv2d(c, c, 1, 1, 0, bias=True)
        self.act = nn.Hardsigmoid()

    def forward(self, x: Tensor) -> Tensor:
        return x * self.act(self.fc(self.pool(x)))


class CSPNeXtBlock(nn.Module):
    """3x3 ConvBNAct to ``int(c2 * e)``, then a depthwise-separable ``k`` x ``k`` block
    (depthwise k x k + BN + act, pointwise 1x1 + BN + act) to c2; plus the input when
    ``shortcut`` and c1 == c2.

    x (Tensor[B, c1, H, W]) -> (Tensor[B, c2, H, W]).

    Example:
        >>> CSPNeXtBlock(16, 16)(torch.zeros(1, 16, 8, 8)).shape
        torch.Size([1, 16, 8, 8])
    """

    def __init__(self, c1: int, c2: int, *, e: float = 1.0, shortcut: bool = True, k: int = 5,
                 act: bool | nn.Module = True) -> None:
        super().__init__()
        hidden = int(c2 * e)
        self.conv1 = ConvBNAct(c1, hidden, 3, act=act)
        self.conv2 = DWConvBNAct(hidden, c2, k, 1, act=act)
        self.use_add = shortcut and c1 == c2

    def forward(self, x: Tensor) -> Tensor:
        y = self.conv2(self.conv1(x))
        return y + x if self.use_add else y


class CSPNeXtLayer(nn.Module):
    """Cross-stage-partial layer of :class:`CSPNeXtBlock`: two 1x1 projections to
    ``int(c2 * e)`` channels; one goes through ``n`` blocks (expansion 1.0), the two are
    concatenated (block path first), optionally gated by :class:`ChannelAttention`, and fused by
    a 1x1 ConvBNAct to c2.

    x (Tensor[B, c1, H, W]) -> (Tensor[B, c2, H, W]).

    Example:
        >>> CSPNeXtLayer(32, 64, n=1, attention=True)(torch.zeros(1, 32, 8, 8)).shape
        torch.Size([1, 64, 8, 8])
    """

    def __init__(self, c1: int, c2: int, *, n: int = 1, shortcut: bool = True, e: float = 0.5,
                 attention: bool = False, k: int = 5, act: bool | nn.Module = True) -> None:
        super().__init__()
        hidden = int(c2 * e)
        self.main_conv = ConvBNAct(c1, hidden, 1, act=act)
        self.short_conv = ConvBNAct(c1, hidden, 1, act=act)
        self.final_conv = ConvBNAct(2 * hidden, c2, 1, act=act)
        self.blocks = nn.Sequential(*(
            CSPNeXtBlock(hidden, hidden, e=1.0, shortcut=shortcut, k=k, act=act) for _ in range(n)
        ))
        self.attention: nn.Module = ChannelAttention(2 * hidden) if attention else nn.Identity()

    def forward(self, x: Tensor) -> Tensor:
        y = torch.cat((self.blocks(self.main_conv(x)), self.short_conv(x)), dim=1)
        return self.final_conv(self.attention(y))
