"""The tiny Darknet detectors (``yolov3-tiny.cfg``, ``yolov4-tiny.cfg``): a small backbone and a
two-level head (strides 16 and 32), three anchors per level.

Network contract as the large ones (:mod:`libreyolo.models.yolo3.nn`) with two output levels:
input Tensor[B, 3, H, W] in [0, 1], H and W multiples of 32 -> [Tensor[B, 3 * (5 + nc), H / 16,
W / 16], Tensor[B, 3 * (5 + nc), H / 32, W / 32]]. Modules are created in cfg layer order.
"""

from __future__ import annotations

from collections.abc import Sequence

import torch
import torch.nn.functional as F
from torch import Tensor, nn

from ...layers.conv import fuse_modules
from .blocks import dconv
from .head import AnchorHead

TINY_STRIDES = (16, 32)


class PoolStride1(nn.Module):
    """Darknet's ``[maxpool] size=2 stride=1``: the window covers (i, i + 1); the last row and
    column see past the border, where Darknet reads -inf (here: the border value repeated, the
    same maximum). x (Tensor[B, C, H, W]) -> Tensor[B, C, H, W]."""

    def forward(self, x: Tensor) -> Tensor:
        return F.max_pool2d(F.pad(x, (0, 1, 0, 1), mode="replicate"), 2, 1)


class TinyDarknet(nn.Module):
    """yolov3-tiny's backbone: 3x3 convs 16 .. 1024, each but the last two followed by a stride-2
    max-pool, the sixth by a stride-1 one. x -> (Tensor[B, 256, H/16, W/16] (before the fifth
    pool), Tensor[B, 1024, H/32, W/32])."""

    def __init__(self) -> None:
        super().__init__()
        self.c16 = nn.Sequential(dconv(3, 16, 3), nn.MaxPool2d(2, 2), dconv(16, 32, 3), nn.MaxPool2d(2, 2),
                                 dconv(32, 64, 3), nn.MaxPool2d(2, 2), dconv(64, 128, 3), nn.MaxPool2d(2, 2),
                                 dconv(128, 256, 3))
        self.c32 = nn.Sequential(nn.MaxPool2d(2, 2), dconv(256, 512, 3), PoolStride1(), dconv(512, 1024, 3))

    def forward(self, x: Tensor) -> tuple[Tensor, Tensor]:
        f16 = self.c16(x)
        return f16, self.c32(f16)


class TinyCSPBlock(nn.Module):
    """yolov4-tiny's stage: a 3x3 conv to ``c`` (``x``); on its second channel half (``[route]
    groups=2 group_id=1``) two 3x3 convs ``a``, ``b`` at c / 2; a 1x1 conv to c of ``cat(b, a)``
    (``t``); output ``cat(x, t)``. x (Tensor[B, c_in, H, W]) -> (Tensor[B, 2c, H, W], t)."""

    def __init__(self, c_in: int, c: int) -> None:
        super().__init__()
        self.conv = dconv(c_in, c, 3)
        self.a = dconv(c // 2, c // 2, 3)
        self.b = dconv(c // 2, c // 2, 3)
        self.t = dconv(c, c, 1)

    def forward(self, x: Tensor) -> tuple[Tensor, Tensor]:
        x = self.conv(x)
        a = self.a(x[:, x.shape[1] // 2:])
        b = self.b(a)
        t = self.t(torch.cat((b, a), 1))
        return torch.cat((x, t), 1), t


class TinyCSPDarknet(nn.Module):
    """yolov4-tiny's backbone: 3x3 stride-2 convs 32, 64, three :class:`TinyCSPBlock` (64, 128,
    256) with stride-2 max-pools after them, a 3x3 conv 512. x -> (Tensor[B, 256, H/16, W/16]
    (the third block's ``t``), Tensor[B, 512, H/32, W/32])."""

    def __init__(self) -> None:
        super().__init__()
        self.stem = nn.Sequential(dconv(3, 32, 3, 2), dconv(32, 64, 3, 2))
        self.block1, self.block2, self.block3 = TinyCSPBlock(64, 64), TinyCSPBlock(128, 128), TinyCSPBlock(256, 256)
        self.pool = nn.MaxPool2d(2, 2)
        self.conv5 = dconv(512, 512, 3)

    def forward(self, x: Tensor) -> tuple[Tensor, Tensor]:
        x, _ = self.block1(self.stem(x))
        x, _ = self.block2(self.pool(x))
        x, t16 = self.block3(self.pool(x))
        return t16, self.conv5(self.pool(x))


class TinyYOLONet(nn.Module):
    """A tiny Darknet detector: ``backbone`` -> (256-channel stride-16, ``c32``-channel stride-32
    features); head 1x1 256 (route), 3x3 512, output at stride 32; 1x1 128 of the route,
    upsample, ``cat(upsampled, stride-16 feature)``, 3x3 256, output at stride 16.

    Attributes as the large nets' (``nc``, ``strides`` = (16, 32), ``head``, ``size``).
    """

    def __init__(self, *, backbone: nn.Module, c32: int, nc: int, size: str, family_name: str,
                 anchors: Sequence[Sequence[tuple[float, float]]], scale_xy: Sequence[float], imgsz: int) -> None:
        super().__init__()
        self.size, self.nc, self.strides, self.family_name = size, nc, TINY_STRIDES, family_name
        self.backbone = backbone
        self.route5 = dconv(c32, 256, 1)
        self.out5 = dconv(256, 512, 3)
        self.lat4 = dconv(256, 128, 1)
        self.up = nn.Upsample(scale_factor=2.0, mode="nearest")
        self.out4 = dconv(128 + 256, 256, 3)
        self.head = AnchorHead(nc=nc, ch=(256, 512), anchors=anchors, strides=TINY_STRIDES, scale_xy=scale_xy)
        self.head.init_bias(imgsz=imgsz)

    def forward(self, x: Tensor) -> list[Tensor]:
        f16, f32 = self.backbone(x)
        r5 = self.route5(f32)  # (B, 256, H/32, W/32)
        p4 = self.out4(torch.cat((self.up(self.lat4(r5)), f16), 1))  # cfg: route -1, <stride-16 layer>
        return self.head([p4, self.out5(r5)])

    def darknet_order(self) -> list[nn.Module]:
        """Modules in cfg layer order (the stride-32 output first)."""
        return [self.backbone, self.route5, self.out5, self.head.m[1], self.lat4, self.out4, self.head.m[0]]

    def fuse(self) -> TinyYOLONet:
        """Fold every BatchNorm into its conv, in place."""
        fuse_modules(self)
        return self
