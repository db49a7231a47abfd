"""The parallel-max-pool SPP bottleneck (CSPDarknet lineage), shared by YOLOX and RTMDet.

Maps Tensor[B, c1, H, W] -> Tensor[B, c2, H, W] with static shapes and no data-dependent
control flow (CUDA-graph capturable). Submodule names (``conv1``, ``m``, ``conv2``) follow the
CSPDarknet convention so reference checkpoints map one to one. The CSP bottleneck and layer
(YOLOX, PicoDet) live in ``libreyolo/layers/csp.py``.
"""

from __future__ import annotations

from collections.abc import Sequence

import torch
from torch import Tensor, nn

from .conv import ConvBNAct


class SPPBottleneck(nn.Module):
    """Spatial pyramid pooling: 1x1 ConvBNAct to c1 // 2, concatenated with its stride-1 max
    pools of each kernel size (in order), fused by a 1x1 ConvBNAct to c2.

    x (Tensor[B, c1, H, W]) -> (Tensor[B, c2, H, W]).
    """

    def __init__(self, c1: int, c2: int, *, kernel_sizes: Sequence[int] = (5, 9, 13),
                 act: bool | nn.Module = True) -> None:
        super().__init__()
        hidden = c1 // 2
        self.conv1 = ConvBNAct(c1, hidden, 1, act=act)
        self.m = nn.ModuleList(nn.MaxPool2d(k, stride=1, padding=k // 2) for k in kernel_sizes)
        self.conv2 = ConvBNAct(hidden * (len(kernel_sizes) + 1), c2, 1, act=act)

    def forward(self, x: Tensor) -> Tensor:
        x = self.conv1(x)
        return self.conv2(torch.cat([x, *(pool(x) for pool in self.m)], dim=1))
