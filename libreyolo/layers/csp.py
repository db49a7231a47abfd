"""CSPDarknet blocks (YOLOv4/v5/YOLOX lineage, also the PicoDet CSP-PAN neck): the residual
bottleneck and the two-path cross-stage-partial layer.

Used by YOLOX (3x3 bottleneck convs) and PicoDet (5x5 depthwise-separable bottleneck convs),
so they live here. Every block maps Tensor[B, c1, H, W] -> Tensor[B, c2, H, W] with static
shapes and no data-dependent control flow (CUDA-graph capturable). Submodule names
(``conv1``, ``conv2``, ``conv3``, ``m``) follow the CSPDarknet convention so reference
checkpoints map one to one.
"""

from __future__ import annotations

import torch
from torch import Tensor, nn

from .conv import ConvBNAct
from .dwconv import conv_or_dw


class CSPBottleneck(nn.Module):
    """1x1 ConvBNAct to ``int(c2 * e)`` -> ``k`` x ``k`` conv (depthwise-separable if asked) to
    c2, plus the input when ``shortcut`` and c1 == c2.

    x (Tensor[B, c1, H, W]) -> (Tensor[B, c2, H, W]).

    Example:
        >>> CSPBottleneck(8, 8, k=5, depthwise=True)(torch.zeros(1, 8, 6, 6)).shape
        torch.Size([1, 8, 6, 6])
    """

    def __init__(self, c1: int, c2: int, *, shortcut: bool = True, e: float = 0.5,
                 depthwise: bool = False, k: int = 3, act: bool | nn.Module = True) -> None:
        super().__init__()
        hidden = int(c2 * e)
        self.conv1 = ConvBNAct(c1, hidden, 1, act=act)
        self.conv2 = conv_or_dw(hidden, c2, k, 1, depthwise=depthwise, act=act)
        self.use_add = shortcut and c1 == c2

    def forward(self, x: Tensor) -> Tensor:
        y = self.conv2(self.conv1(x))
        return y + x if self.use_add else y


class CSPLayer(nn.Module):
    """Cross-stage-partial layer: two 1x1 projections to ``int(c2 * e)`` channels; one goes
    through ``n`` :class:`CSPBottleneck` (expansion 1.0, kernel ``k``), the two are concatenated
    (bottleneck path first) and fused by a 1x1 ConvBNAct to c2.

    x (Tensor[B, c1, H, W]) -> (Tensor[B, c2, H, W]).

    Example:
        >>> CSPLayer(32, 64, n=2)(torch.zeros(1, 32, 8, 8)).shape
        torch.Size([1, 64, 8, 8])
    """

    def __init__(self, c1: int, c2: int, *, n: int = 1, shortcut: bool = True, e: float = 0.5,
                 depthwise: bool = False, k: int = 3, act: bool | nn.Module = True) -> None:
        super().__init__()
        hidden = int(c2 * e)
        self.conv1 = ConvBNAct(c1, hidden, 1, act=act)
        self.conv2 = ConvBNAct(c1, hidden, 1, act=act)
        self.conv3 = ConvBNAct(2 * hidden, c2, 1, act=act)
        self.m = nn.Sequential(*(
            CSPBottleneck(hidden, hidden, shortcut=shortcut, e=1.0, depthwise=depthwise, k=k, act=act)
            for _ in range(n)
        ))

    def forward(self, x: Tensor) -> Tensor:
        return self.conv3(torch.cat((self.m(self.conv1(x)), self.conv2(x)), dim=1))
