"""Depthwise-separable convolution block: depthwise k x k ConvBNAct, then pointwise 1x1 ConvBNAct.

Both halves carry their own BatchNorm and activation (the layout used by YOLOX-Nano and other
mobile detectors); :func:`libreyolo.layers.conv.fuse_modules` folds both BatchNorms.
"""

from __future__ import annotations

import torch  # noqa: F401 - the docstring example uses it
from torch import Tensor, nn

from .conv import ConvBNAct


class DWConvBNAct(nn.Module):
    """``pconv(dconv(x))``: dconv = ConvBNAct(c1, c1, k, s, groups=c1), pconv = ConvBNAct(c1, c2, 1).

    x (Tensor[B, c1, H, W]) -> (Tensor[B, c2, H/s, W/s]).

    Example:
        >>> DWConvBNAct(8, 16, k=3, s=2)(torch.zeros(1, 8, 32, 32)).shape
        torch.Size([1, 16, 16, 16])
    """

    def __init__(self, c1: int, c2: int, k: int = 3, s: int = 1, *,
                 act: bool | nn.Module = True) -> None:
        super().__init__()
        self.dconv = ConvBNAct(c1, c1, k, s, g=c1, act=act)
        self.pconv = ConvBNAct(c1, c2, 1, 1, act=act)

    def forward(self, x: Tensor) -> Tensor:
        return self.pconv(self.dconv(x))


def conv_or_dw(c1: int, c2: int, k: int, s: int = 1, *, depthwise: bool,
               act: bool | nn.Module = True) -> nn.Module:
    """A :class:`DWConvBNAct` when ``depthwise``, else a plain :class:`ConvBNAct` (k x k, stride s)."""
    if depthwise:
        return DWConvBNAct(c1, c2, k, s, act=act)
    return ConvBNAct(c1, c2, k, s, act=act)
