"""Darknet building blocks and backbones (YOLOv3's Darknet-53, YOLOv4's CSPDarknet53).

Every conv is a :class:`~libreyolo.layers.conv.ConvBNAct` (conv without bias, BatchNorm,
activation) with Darknet's BatchNorm epsilon; the activation is LeakyReLU(0.1) (``"leaky"``) or
Mish (``"mish"``), as in the reference ``.cfg`` files. Modules are created in the order of the
reference ``.cfg`` layers, so that :func:`darknet_convs` lists the convolutions in the order a
Darknet ``.weights`` file stores them.

All blocks map Tensor[B, C, H, W] -> Tensor[B, C', H', W'] with static shapes (CUDA-graph
capturable).
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Literal

import torch
from torch import Tensor, nn

from ...layers.conv import ConvBNAct
from .local import LocallyConnected2d

Act = Literal["leaky", "mish"]
DARKNET_BN_EPS = 1e-5  # Darknet normalises with a small epsilon (1e-5 here; see the README)


def make_darknet_act(act: Act) -> nn.Module:
    """``"leaky"`` -> LeakyReLU(0.1), ``"mish"`` -> Mish (both in place)."""
    if act == "leaky":
        return nn.LeakyReLU(0.1, inplace=True)
    if act == "mish":
        return nn.Mish(inplace=True)
    raise ValueError(f"unknown Darknet activation {act!r}; use 'leaky' or 'mish'")


def dconv(c1: int, c2: int, k: int = 1, s: int = 1, *, act: Act = "leaky") -> ConvBNAct:
    """A Darknet ``[convolutional]`` layer with ``batch_normalize=1``: 'same' padding ``k // 2``,
    Darknet's weight initialisation.

    x (Tensor[B, c1, H, W]) -> Tensor[B, c2, H / s, W / s].
    """
    m = ConvBNAct(c1, c2, k, s, act=make_darknet_act(act))
    if m.bn is not None:
        m.bn.eps = DARKNET_BN_EPS
    # Darknet's own initialisation (make_convolutional_layer): normal, std sqrt(2 / fan_in). With
    # PyTorch's default (variance 1 / (3 fan_in)) the signal of an untrained eval-mode Darknet
    # shrinks layer by layer until its outputs no longer depend on the input.
    nn.init.kaiming_normal_(m.conv.weight, mode="fan_in", nonlinearity="relu")
    return m


class DarkResidual(nn.Module):
    """Darknet residual unit: ``x + conv3x3(conv1x1(x))`` with ``hidden`` channels in between
    (the ``[shortcut] from=-3`` pattern of the cfg files). The branch's last BatchNorm scale
    starts at zero, so an untrained unit is the identity (a deviation from Darknet's init of 1).

    x (Tensor[B, c, H, W]) -> Tensor[B, c, H, W].
    """

    def __init__(self, c: int, hidden: int, *, act: Act = "leaky") -> None:
        super().__init__()
        self.cv1 = dconv(c, hidden, 1, act=act)
        self.cv2 = dconv(hidden, c, 3, act=act)
        if self.cv2.bn is not None:  # the branch starts at zero (the unit is the identity): with unit-gain
            nn.init.zeros_(self.cv2.bn.weight)  # convs, 23 summed branches would grow the signal 2^23-fold

    def forward(self, x: Tensor) -> Tensor:
        return x + self.cv2(self.cv1(x))


class DarkStage(nn.Module):
    """Darknet-53 stage: a stride-2 3x3 conv to ``c`` then ``n`` residual units (hidden c / 2).

    x (Tensor[B, c_in, H, W]) -> Tensor[B, c, H / 2, W / 2].
    """

    def __init__(self, c_in: int, c: int, n: int, *, act: Act = "leaky") -> None:
        super().__init__()
        self.down = dconv(c_in, c, 3, 2, act=act)
        self.blocks = nn.Sequential(*(DarkResidual(c, c // 2, act=act) for _ in range(n)))

    def forward(self, x: Tensor) -> Tensor:
        return self.blocks(self.down(x))


class CSPStage(nn.Module):
    """CSPDarknet53 stage (YOLOv4): a stride-2 3x3 conv to ``c``, two 1x1 splits to ``h``
    channels (``h = c`` in the first stage, ``c / 2`` after), ``n`` residual units on the second
    split (hidden ``c / 2`` in the first stage, ``h`` after), a 1x1 transition, then
    ``cat(transition, first split)`` (the cfg's ``[route] layers=-1,-N`` order) fused by a 1x1
    conv to ``c``.

    x (Tensor[B, c_in, H, W]) -> Tensor[B, c, H / 2, W / 2].
    """

    def __init__(self, c_in: int, c: int, n: int, *, first: bool = False, act: Act = "mish") -> None:
        super().__init__()
        h = c if first else c // 2
        hidden = c // 2 if first else h
        self.down = dconv(c_in, c, 3, 2, act=act)
        self.split1 = dconv(c, h, 1, act=act)  # the cross-stage (shortcut) part
        self.split2 = dconv(c, h, 1, act=act)  # the part through the residual units
        self.blocks = nn.Sequential(*(DarkResidual(h, hidden, act=act) for _ in range(n)))
        self.transition = dconv(h, h, 1, act=act)
        self.fuse_conv = dconv(2 * h, c, 1, act=act)

    def forward(self, x: Tensor) -> Tensor:
        x = self.down(x)
        part = self.split1(x)
        y = self.transition(self.blocks(self.split2(x)))
        return self.fuse_conv(torch.cat((y, part), 1))


class Darknet53(nn.Module):
    """Darknet-53 (YOLOv3) without its classifier: a 3x3 stem conv (32) and five stages of
    (1, 2, 8, 8, 4) residual units at widths 64 .. 1024, LeakyReLU(0.1).

    x (Tensor[B, 3, H, W]) -> (Tensor[B, 256, H/8, W/8], Tensor[B, 512, H/16, W/16],
    Tensor[B, 1024, H/32, W/32]).
    """

    widths = (64, 128, 256, 512, 1024)

    def __init__(self, *, depths: Sequence[int] = (1, 2, 8, 8, 4), act: Act = "leaky") -> None:
        super().__init__()
        self.stem = dconv(3, 32, 3, act=act)
        c, stages = 32, []
        for w, n in zip(self.widths, depths, strict=True):
            stages.append(DarkStage(c, w, n, act=act))
            c = w
        self.stages = nn.ModuleList(stages)

    def forward(self, x: Tensor) -> tuple[Tensor, Tensor, Tensor]:
        x = self.stem(x)
        feats = []
        for stage in self.stages:
            x = stage(x)
            feats.append(x)
        return feats[2], feats[3], feats[4]


class CSPDarknet53(nn.Module):
    """CSPDarknet53 (YOLOv4) without its classifier: a 3x3 stem conv (32) and five CSP stages of
    (1, 2, 8, 8, 4) residual units at widths 64 .. 1024, Mish.

    x (Tensor[B, 3, H, W]) -> (Tensor[B, 256, H/8, W/8], Tensor[B, 512, H/16, W/16],
    Tensor[B, 1024, H/32, W/32]).
    """

    widths = (64, 128, 256, 512, 1024)

    def __init__(self, *, depths: Sequence[int] = (1, 2, 8, 8, 4), act: Act = "mish") -> None:
        super().__init__()
        self.stem = dconv(3, 32, 3, act=act)
        c, stages = 32, []
        for i, (w, n) in enumerate(zip(self.widths, depths, strict=True)):
            stages.append(CSPStage(c, w, n, first=i == 0, act=act))
            c = w
        self.stages = nn.ModuleList(stages)

    def forward(self, x: Tensor) -> tuple[Tensor, Tensor, Tensor]:
        x = self.stem(x)
        feats = []
        for stage in self.stages:
            x = stage(x)
            feats.append(x)
        return feats[2], feats[3], feats[4]


class PoolPyramid(nn.Module):
    """YOLOv4's SPP block (no convs): ``cat(maxpool13(x), maxpool9(x), maxpool5(x), x)``, stride 1,
    'same' padding, the cfg's ``[route] layers=-1,-3,-5,-6`` order.

    x (Tensor[B, C, H, W]) -> Tensor[B, 4C, H, W].
    """

    def __init__(self, kernel_sizes: Sequence[int] = (5, 9, 13)) -> None:
        super().__init__()
        self.pools = nn.ModuleList(nn.MaxPool2d(k, 1, k // 2) for k in kernel_sizes)

    def forward(self, x: Tensor) -> Tensor:
        return torch.cat([*(p(x) for p in reversed(self.pools)), x], 1)


def conv_set(c_in: int, c: int, n: int = 5, *, act: Act = "leaky") -> nn.Sequential:
    """``n`` alternating convs 1x1 -> c, 3x3 -> 2c, 1x1 -> c, ... (the heads' 5-conv sets).

    x (Tensor[B, c_in, H, W]) -> Tensor[B, c if n is odd else 2c, H, W].
    """
    layers, ci = [], c_in
    for i in range(n):
        co, k = (c, 1) if i % 2 == 0 else (2 * c, 3)
        layers.append(dconv(ci, co, k, act=act))
        ci = co
    return nn.Sequential(*layers)


def darknet_convs(order: Sequence[nn.Module]) -> list[tuple[nn.Module, nn.BatchNorm2d | None]]:
    """The (layer, BatchNorm or None) pairs of ``order`` (modules in Darknet cfg order), expanding
    every container in registration order: :class:`ConvBNAct` gives ``(conv, bn)``, a bare
    ``nn.Conv2d`` (an output conv with bias), ``nn.Linear`` (a ``[connected]`` layer) or
    :class:`~.local.LocallyConnected2d` (a ``[local]`` layer) gives ``(layer, None)``."""
    out: list[tuple[nn.Module, nn.BatchNorm2d | None]] = []
    for mod in order:
        for m in mod.modules():
            if isinstance(m, ConvBNAct):
                out.append((m.conv, m.bn))
            elif isinstance(m, nn.Conv2d) and not _inside_convbnact(mod, m):
                out.append((m, None))
            elif isinstance(m, (nn.Linear, LocallyConnected2d)):  # [connected], [local] (YOLOv1): bias, weights
                out.append((m, None))
    return out


def _inside_convbnact(root: nn.Module, conv: nn.Conv2d) -> bool:
    return any(isinstance(m, ConvBNAct) and m.conv is conv for m in root.modules())


class Reorg(nn.Module):
    """Darknet's ``[reorg] stride=2`` layer (YOLOv2's passthrough), bit for bit as Darknet's
    ``reorg_cpu`` (forward direction) lays out memory, which is *not* a plain space-to-depth: the
    input buffer ``Tensor[C, H, W]`` is read as ``[C / 4, 2H, 2W]`` and its 2x2 phases are stacked
    in front of the channels, then the result buffer ``[C, H, W]`` is read as ``[4C, H / 2, W / 2]``.
    Darknet-trained weights need exactly this order. Reshapes and one permute only (portable).

    x (Tensor[B, C, H, W], C divisible by 4, H and W even) -> Tensor[B, 4C, H / 2, W / 2].
    """

    def forward(self, x: Tensor) -> Tensor:
        b, c, h, w = x.shape
        y = x.reshape(b, c // 4, h, 2, w, 2)  # the buffer as [C/4, 2H, 2W]: (c2, j, dy, i, dx)
        y = y.permute(0, 3, 5, 1, 2, 4)  # (dy, dx, c2, j, i): phase-major channels
        return y.reshape(b, 4 * c, h // 2, w // 2)
