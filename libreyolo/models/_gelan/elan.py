"""GELAN building blocks (YOLOv9, arXiv:2402.13616): CSP-ELAN aggregation with
re-parameterisable bottlenecks, the ELAN-SPP block and the average-pool downsamplers.

Every block maps Tensor[B, c1, H, W] -> Tensor[B, c2, H', W'] with static shapes and no
data-dependent control flow, so a whole GELAN network can be captured in a CUDA graph.
"""

from __future__ import annotations

import torch
import torch.nn.functional as F
from torch import Tensor, nn

from ...layers.conv import ConvBNAct, RepConvN


class RepNBottleneck(nn.Module):
    """RepConvN 3x3 -> ConvBNAct 3x3, with a residual add when ``shortcut`` and c1 == c2.

    x (Tensor[B, c1, H, W]) -> (Tensor[B, c2, H, W]).
    """

    def __init__(self, c1: int, c2: int, *, shortcut: bool = True, e: float = 0.5) -> None:
        super().__init__()
        hidden = int(c2 * e)
        self.cv1 = RepConvN(c1, hidden)
        self.cv2 = ConvBNAct(hidden, c2, 3)
        self.add = shortcut and c1 == c2

    def forward(self, x: Tensor) -> Tensor:
        y = self.cv2(self.cv1(x))
        return x + y if self.add else y


class RepNCSP(nn.Module):
    """CSP block: two 1x1 projections, ``n`` RepNBottlenecks on one, concatenated, fused by 1x1.

    x (Tensor[B, c1, H, W]) -> (Tensor[B, c2, H, W]).
    """

    def __init__(self, c1: int, c2: int, n: int = 1, *, e: float = 0.5) -> None:
        super().__init__()
        hidden = int(c2 * e)
        self.cv1 = ConvBNAct(c1, hidden, 1)
        self.cv2 = ConvBNAct(c1, hidden, 1)
        self.cv3 = ConvBNAct(2 * hidden, c2, 1)
        self.m = nn.Sequential(*(RepNBottleneck(hidden, hidden, e=1.0) for _ in range(n)))

    def forward(self, x: Tensor) -> Tensor:
        return self.cv3(torch.cat((self.m(self.cv1(x)), self.cv2(x)), 1))


class RepNCSPELAN4(nn.Module):
    """GELAN block: 1x1 to ``c3`` channels split in halves; the second half feeds two chained
    stages (RepNCSP of depth ``n`` + 3x3 conv, each ``c4`` wide); all four parts are
    concatenated and projected to ``c2`` by a 1x1 conv.

    x (Tensor[B, c1, H, W]) -> (Tensor[B, c2, H, W]).
    """

    def __init__(self, c1: int, c2: int, c3: int, c4: int, n: int = 1) -> None:
        super().__init__()
        self.c = c3 // 2
        self.cv1 = ConvBNAct(c1, c3, 1)
        self.cv2 = nn.Sequential(RepNCSP(c3 // 2, c4, n), ConvBNAct(c4, c4, 3))
        self.cv3 = nn.Sequential(RepNCSP(c4, c4, n), ConvBNAct(c4, c4, 3))
        self.cv4 = ConvBNAct(c3 + 2 * c4, c2, 1)

    def forward(self, x: Tensor) -> Tensor:
        a = self.cv1(x)  # (B, c3, H, W): both halves go to the concatenation unchanged
        b = self.cv2(a[:, self.c:])
        c = self.cv3(b)
        return self.cv4(torch.cat((a, b, c), 1))


class ELAN1(nn.Module):
    """Light ELAN block (no CSP stages): like :class:`RepNCSPELAN4` with plain 3x3 convs.

    x (Tensor[B, c1, H, W]) -> (Tensor[B, c2, H, W]).
    """

    def __init__(self, c1: int, c2: int, c3: int, c4: int) -> None:
        super().__init__()
        self.c = c3 // 2
        self.cv1 = ConvBNAct(c1, c3, 1)
        self.cv2 = ConvBNAct(c3 // 2, c4, 3)
        self.cv3 = ConvBNAct(c4, c4, 3)
        self.cv4 = ConvBNAct(c3 + 2 * c4, c2, 1)

    def forward(self, x: Tensor) -> Tensor:
        a = self.cv1(x)
        b = self.cv2(a[:, self.c:])
        c = self.cv3(b)
        return self.cv4(torch.cat((a, b, c), 1))


class SPPELAN(nn.Module):
    """ELAN-style spatial pyramid pooling: 1x1 to ``c3``, three chained 5x5 stride-1 max pools,
    the four maps concatenated and projected to ``c2``.

    x (Tensor[B, c1, H, W]) -> (Tensor[B, c2, H, W]).
    """

    def __init__(self, c1: int, c2: int, c3: int, k: int = 5) -> None:
        super().__init__()
        self.cv1 = ConvBNAct(c1, c3, 1)
        self.pool = nn.MaxPool2d(kernel_size=k, stride=1, padding=k // 2)
        self.cv5 = ConvBNAct(4 * c3, c2, 1)

    def forward(self, x: Tensor) -> Tensor:
        y1 = self.cv1(x)
        y2 = self.pool(y1)
        y3 = self.pool(y2)
        y4 = self.pool(y3)
        return self.cv5(torch.cat((y1, y2, y3, y4), 1))


class AConv(nn.Module):
    """Average-pool (2x2, stride 1) then 3x3 stride-2 conv: a stride-2 downsampler.

    x (Tensor[B, c1, H, W]) -> (Tensor[B, c2, H/2, W/2]) for even H, W.
    """

    def __init__(self, c1: int, c2: int) -> None:
        super().__init__()
        self.cv1 = ConvBNAct(c1, c2, 3, 2, 1)

    def forward(self, x: Tensor) -> Tensor:
        return self.cv1(F.avg_pool2d(x, 2, 1, 0, False, True))


class ADown(nn.Module):
    """Two-path stride-2 downsampler: average-pool (2x2, stride 1), split channels in halves;
    one half through a 3x3 stride-2 conv, the other through a 3x3 stride-2 max pool and a 1x1
    conv; the halves are concatenated.

    x (Tensor[B, c1, H, W]) -> (Tensor[B, c2, H/2, W/2]) for even H, W; c1 and c2 even.
    """

    def __init__(self, c1: int, c2: int) -> None:
        super().__init__()
        self.c = c2 // 2
        self.cv1 = ConvBNAct(c1 // 2, self.c, 3, 2, 1)
        self.cv2 = ConvBNAct(c1 // 2, self.c, 1, 1, 0)

    def forward(self, x: Tensor) -> Tensor:
        x = F.avg_pool2d(x, 2, 1, 0, False, True)
        x1, x2 = x.chunk(2, 1)
        return torch.cat((self.cv1(x1), self.cv2(F.max_pool2d(x2, 3, 2, 1))), 1)
