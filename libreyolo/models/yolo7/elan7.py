"""YOLOv7 building blocks (arXiv:2207.02696): the extended-ELAN aggregation block, the
two-branch max-pool/conv downsampler and the SPP cross-stage-partial blocks.

Every block maps Tensor[B, c1, H, W] -> Tensor[B, c2, H', W'] with static shapes and no
data-dependent control flow, so a network made of them can be captured in a CUDA graph.
Concatenation orders follow the reference configurations, so that reference weights map onto
these modules channel for channel.
"""

from __future__ import annotations

from typing import Literal

import torch
from torch import Tensor, nn

from ...layers.conv import ConvBNAct

Act = Literal["silu", "lrelu"]


def make_act7(kind: Act) -> bool | nn.Module:
    """The activation argument of :class:`ConvBNAct` for a YOLOv7 model.

    ``"silu"`` (YOLOv7, YOLOv7-X...) -> ``True`` (SiLU); ``"lrelu"`` (YOLOv7-tiny) ->
    ``LeakyReLU(0.1)``, in place (it always follows a freshly computed conv/BN output).
    """
    if kind == "silu":
        return True
    if kind == "lrelu":
        return nn.LeakyReLU(0.1, inplace=True)
    raise ValueError(f"unknown activation {kind!r}; expected 'silu' or 'lrelu'")


def conv7(c1: int, c2: int, k: int = 1, s: int = 1, *, act: Act = "silu") -> ConvBNAct:
    """Conv + BN + YOLOv7 activation (``act``), 'same' padding."""
    return ConvBNAct(c1, c2, k, s, act=make_act7(act))


class ELAN7(nn.Module):
    """Extended efficient layer aggregation block (ELAN / E-ELAN in deploy form).

    Two 1x1 projections ``a`` and ``b`` of ``c_branch`` channels; ``b`` feeds a chain of ``n``
    3x3 convs ``c_1..c_n`` (``c_mid`` channels). Every ``tap``-th chain output is kept and
    everything kept is concatenated in reverse depth order (``c_n, ..., b, a``, the reference
    layout) and projected to ``c_out`` by a 1x1 conv.

    YOLOv7 backbone: ``n=4, tap=2`` (concat ``c4, c2, b, a``); YOLOv7 neck: ``n=4, tap=1``
    (``c4, c3, c2, c1, b, a``) with ``c_mid = c_branch / 2``; YOLOv7-tiny: ``n=2, tap=1``.

    x (Tensor[B, c_in, H, W]) -> (Tensor[B, c_out, H, W]).

    Example:
        >>> m = ELAN7(64, 128, c_branch=32, c_mid=32, n=2, tap=1, act="lrelu")
        >>> m(torch.zeros(1, 64, 8, 8)).shape
        torch.Size([1, 128, 8, 8])
    """

    def __init__(self, c_in: int, c_out: int, *, c_branch: int, c_mid: int, n: int = 4,
                 tap: int = 2, act: Act = "silu") -> None:
        super().__init__()
        if n < 1 or tap < 1 or n % tap:
            raise ValueError(f"ELAN7 needs n >= 1 and tap dividing n, got n={n}, tap={tap}")
        self.tap = tap
        self.cv1 = conv7(c_in, c_branch, 1, act=act)  # a
        self.cv2 = conv7(c_in, c_branch, 1, act=act)  # b
        self.m = nn.ModuleList(
            conv7(c_branch if i == 0 else c_mid, c_mid, 3, act=act) for i in range(n)
        )
        self.out = conv7(2 * c_branch + (n // tap) * c_mid, c_out, 1, act=act)

    def forward(self, x: Tensor) -> Tensor:
        y = self.cv2(x)
        parts = [self.cv1(x), y]
        for i, m in enumerate(self.m):
            y = m(y)
            if (i + 1) % self.tap == 0:
                parts.append(y)
        return self.out(torch.cat(parts[::-1], 1))


class MPConv(nn.Module):
    """YOLOv7 downsampler: ``cat(conv3x3_s2(conv1x1(x)), conv1x1(maxpool2(x)))``.

    Both branches are ``c`` channels wide, so the output has ``2 * c`` channels.
    x (Tensor[B, c_in, H, W]) -> (Tensor[B, 2c, H/2, W/2]) (H, W even).
    """

    def __init__(self, c_in: int, c: int, *, act: Act = "silu") -> None:
        super().__init__()
        self.pool = nn.MaxPool2d(2, 2)
        self.cv_pool = conv7(c_in, c, 1, act=act)
        self.cv1 = conv7(c_in, c, 1, act=act)
        self.cv2 = conv7(c, c, 3, 2, act=act)

    def forward(self, x: Tensor) -> Tensor:
        return torch.cat((self.cv2(self.cv1(x)), self.cv_pool(self.pool(x))), 1)


def _pools(ks: tuple[int, ...]) -> nn.ModuleList:
    return nn.ModuleList(nn.MaxPool2d(k, 1, k // 2) for k in ks)


class SPPCSPC(nn.Module):
    """SPP with a cross-stage-partial connection (YOLOv7 neck entry), hidden width ``c_out``.

    Main path: 1x1 -> 3x3 -> 1x1, then ``cat(x1, pool5, pool9, pool13)`` -> 1x1 -> 3x3;
    shortcut: 1x1; both concatenated and projected by a 1x1 conv.
    x (Tensor[B, c_in, H, W]) -> (Tensor[B, c_out, H, W]).
    """

    def __init__(self, c_in: int, c_out: int, *, k: tuple[int, ...] = (5, 9, 13),
                 act: Act = "silu") -> None:
        super().__init__()
        c = c_out
        self.cv1 = conv7(c_in, c, 1, act=act)
        self.cv2 = conv7(c_in, c, 1, act=act)
        self.cv3 = conv7(c, c, 3, act=act)
        self.cv4 = conv7(c, c, 1, act=act)
        self.m = _pools(k)
        self.cv5 = conv7((len(k) + 1) * c, c, 1, act=act)
        self.cv6 = conv7(c, c, 3, act=act)
        self.cv7 = conv7(2 * c, c_out, 1, act=act)

    def forward(self, x: Tensor) -> Tensor:
        x1 = self.cv4(self.cv3(self.cv1(x)))
        y1 = self.cv6(self.cv5(torch.cat([x1, *(m(x1) for m in self.m)], 1)))
        return self.cv7(torch.cat((y1, self.cv2(x)), 1))


class SPPCSPTiny(nn.Module):
    """The lighter SPP-CSP block of YOLOv7-tiny, width ``c_out``.

    ``y = cv2(x)``; ``cat(pool13(y), pool9(y), pool5(y), y)`` -> 1x1; concatenated with the
    shortcut ``cv1(x)`` and projected by a 1x1 conv.
    x (Tensor[B, c_in, H, W]) -> (Tensor[B, c_out, H, W]).
    """

    def __init__(self, c_in: int, c_out: int, *, k: tuple[int, ...] = (5, 9, 13),
                 act: Act = "lrelu") -> None:
        super().__init__()
        c = c_out
        self.cv1 = conv7(c_in, c, 1, act=act)
        self.cv2 = conv7(c_in, c, 1, act=act)
        self.m = _pools(k)
        self.cv3 = conv7((len(k) + 1) * c, c, 1, act=act)
        self.cv4 = conv7(2 * c, c_out, 1, act=act)

    def forward(self, x: Tensor) -> Tensor:
        y = self.cv2(x)
        pooled = [m(y) for m in self.m][::-1]
        y = self.cv3(torch.cat([*pooled, y], 1))
        return self.cv4(torch.cat((y, self.cv1(x)), 1))
