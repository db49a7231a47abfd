"""Darknet's ``[local]`` layer (a locally connected convolution: one kernel per output location),
used by the released ``yolov1.cfg`` in place of the paper's 4096-wide fully connected layer.

Darknet (``local_layer.c``): for output location ``j`` (row-major over ``out_h x out_w``) the
``n x (c * size * size)`` weight block ``j`` multiplies the im2col column ``j`` of the padded input
(rows ordered channel, kernel row, kernel column); the bias has one value per output element,
laid out ``(n, out_h, out_w)``. Both are stored in that order in a ``.weights`` file, which is
the order of :attr:`LocallyConnected2d.weight` (Tensor[L, n, c * k * k]) and
:attr:`LocallyConnected2d.bias` (Tensor[n, out_h, out_w]) here.

The forward is ``k * k`` static slices, one stack and one batched matmul: static shapes,
portable ONNX ops (Pad, Slice, Concat, MatMul), CUDA-graph capturable.
"""

from __future__ import annotations

import torch
import torch.nn.functional as F
from torch import Tensor, nn


class LocallyConnected2d(nn.Module):
    """x (Tensor[B, c1, H, W] with (H, W) == ``in_hw``) -> Tensor[B, c2, H', W'],
    ``H' = (H + 2 pad - k) // s + 1`` (Darknet's ``pad`` is the padding in pixels: ``pad=1`` with
    ``size=3`` keeps the size).

    Example:
        >>> m = LocallyConnected2d(8, 4, 3, in_hw=(7, 7))
        >>> m(torch.zeros(2, 8, 7, 7)).shape, tuple(m.weight.shape), tuple(m.bias.shape)
        (torch.Size([2, 4, 7, 7]), (49, 4, 72), (4, 7, 7))
    """

    def __init__(self, c1: int, c2: int, k: int, *, in_hw: tuple[int, int], s: int = 1, pad: int = 1) -> None:
        super().__init__()
        self.c1, self.c2, self.k, self.s, self.pad = c1, c2, k, s, pad
        self.in_hw = (int(in_hw[0]), int(in_hw[1]))
        self.out_hw = tuple((v + 2 * pad - k) // s + 1 for v in self.in_hw)
        loc = self.out_hw[0] * self.out_hw[1]
        self.weight = nn.Parameter(torch.empty(loc, c2, c1 * k * k))
        self.bias = nn.Parameter(torch.zeros(c2, *self.out_hw))
        if self.weight.device.type != "meta":
            # Darknet draws uniform(-1, 1) * sqrt(2 / fan_in); normal with that std here, every location
            nn.init.normal_(self.weight, std=(2.0 / (c1 * k * k)) ** 0.5)

    def forward(self, x: Tensor) -> Tensor:
        b = x.shape[0]
        oh, ow = self.out_hw
        k, s = self.k, self.s
        xp = F.pad(x, (self.pad,) * 4) if self.pad else x
        taps = [xp[:, :, dy:dy + s * (oh - 1) + 1:s, dx:dx + s * (ow - 1) + 1:s] for dy in range(k) for dx in range(k)]
        cols = torch.stack(taps, 2).reshape(b, self.c1 * k * k, oh * ow)  # (B, K, L): im2col row order (c, ky, kx)
        out = torch.matmul(self.weight, cols.permute(2, 1, 0))  # (L, n, K) @ (L, K, B) -> (L, n, B)
        return out.permute(2, 1, 0).reshape(b, self.c2, oh, ow) + self.bias

    def extra_repr(self) -> str:
        return f"{self.c1}, {self.c2}, kernel_size={self.k}, stride={self.s}, pad={self.pad}, in_hw={self.in_hw}"
