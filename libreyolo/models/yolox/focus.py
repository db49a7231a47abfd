"""Focus stem (YOLOX, arXiv:2107.08430): space-to-depth rearrangement followed by a conv.

The 2x2 pixel neighbourhood of every location is moved into channels, halving H and W and
quadrupling C without losing information; a ConvBNAct then mixes the 4 * c1 channels.
"""

from __future__ import annotations

import torch
from torch import Tensor, nn

from ...layers.conv import ConvBNAct


def space_to_depth(x: Tensor) -> Tensor:
    """x (Tensor[B, C, H, W], H and W even) -> (Tensor[B, 4C, H/2, W/2]).

    Channel groups, in order: even rows / even cols, odd rows / even cols, even rows / odd cols,
    odd rows / odd cols (the order checkpoints of the YOLOX reference were trained with).

    Example:
        >>> space_to_depth(torch.arange(16.).view(1, 1, 4, 4))[0, :, 0, 0].tolist()
        [0.0, 4.0, 1.0, 5.0]
    """
    return torch.cat(
        (x[..., ::2, ::2], x[..., 1::2, ::2], x[..., ::2, 1::2], x[..., 1::2, 1::2]), dim=1
    )


class Focus(nn.Module):
    """Space-to-depth, then ConvBNAct(4 * c1, c2, k, s).

    x (Tensor[B, c1, H, W], H and W even) -> (Tensor[B, c2, H / (2s), W / (2s)]).

    Example:
        >>> Focus(3, 16, k=3)(torch.zeros(1, 3, 64, 64)).shape
        torch.Size([1, 16, 32, 32])
    """

    def __init__(self, c1: int, c2: int, *, k: int = 1, s: int = 1,
                 act: bool | nn.Module = True) -> None:
        super().__init__()
        self.conv = ConvBNAct(c1 * 4, c2, k, s, act=act)

    def forward(self, x: Tensor) -> Tensor:
        return self.conv(space_to_depth(x))
