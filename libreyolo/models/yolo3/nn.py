"""YOLOv3 detection network (the paper's YOLOv3-416, size ``b``; ``spp``: Darknet's
YOLOv3-SPP): Darknet-53 backbone, a three-scale FPN head (five-conv sets, nearest upsampling,
concatenation with the backbone levels), three anchors per scale, LeakyReLU(0.1) throughout.
Size ``spp`` splits the stride-32 five-conv set with YOLOv4's pool pyramid
(``yolov3-spp.cfg``: three convs, ``cat(pool13, pool9, pool5, x)``, three convs).

Contract (the rest of the library depends on it): input Tensor[B, 3, H, W] float in [0, 1] RGB,
H and W multiples of 32; output, in train and eval mode alike, a list of three tensors for
strides 8, 16, 32, each Tensor[B, 3 * (5 + nc), H / s, W / s] of raw logits laid out
``(anchor, field)``: per anchor ``tx, ty, tw, th, obj, cls_0..cls_{nc-1}``. Decoding lives in
:mod:`libreyolo.models._darknet.postprocess` (the family's captured decode and eager postprocess).

Modules are created in the order of the reference ``yolov3.cfg`` layers; :meth:`YOLO3Net.darknet_order`
lists them in that order for the Darknet ``.weights`` reader.
"""

from __future__ import annotations

import torch
from torch import Tensor, nn

from ...errors import ConfigError
from ...layers.conv import fuse_modules
from .._darknet.blocks import Darknet53, PoolPyramid, conv_set, dconv
from .._darknet.head import AnchorHead
from .._darknet.tiny import TinyDarknet, TinyYOLONet

STRIDES = (8, 16, 32)
# The COCO anchors of the paper (yolov3.cfg), in input pixels, per level of stride 8, 16, 32.
ANCHORS = (((10, 13), (16, 30), (33, 23)), ((30, 61), (62, 45), (59, 119)), ((116, 90), (156, 198), (373, 326)))
IMGSZ = 416
SIZES = ("tiny", "b", "spp")  # smallest first, as the other families
# yolov3-tiny.cfg's anchors (input pixels), strides 16 and 32
TINY_ANCHORS = (((10, 14), (23, 27), (37, 58)), ((81, 82), (135, 169), (344, 319)))
# published counts at 80 classes (the paper's 61.9 M; 63.0 M for YOLOv3-SPP in the Ultralytics
# YOLOv3 table); yolov3.cfg / yolov3-spp.cfg give 61,949,149 / 62,998,749 with BatchNorm terms
PAPER_PARAMS_M = {"b": 61.9, "spp": 63.0, "tiny": 8.9}  # tiny: yolov3-tiny.cfg 8,858,734


class YOLO3Net(nn.Module):
    """YOLOv3: ``head(neck(darknet53(x)))``; see the module docstring for the contract.

    Attributes read by postprocess / decode / loss: ``nc``, ``strides``, ``size``, ``head``
    (anchors, scale_xy, cls_act), ``recipe`` (the loss settings of this family).

    Example:
        >>> net = build_yolo3(size="b", nc=80).eval()
        >>> [tuple(o.shape) for o in net(torch.zeros(1, 3, 64, 64))]
        [(1, 255, 8, 8), (1, 255, 4, 4), (1, 255, 2, 2)]
    """

    family_name = "yolo3"

    def __init__(self, *, nc: int, size: str = "b") -> None:
        super().__init__()
        self.size, self.nc, self.strides = size, nc, STRIDES
        self.backbone = Darknet53()
        self.set5 = (nn.Sequential(conv_set(1024, 512, 3), PoolPyramid((5, 9, 13)), conv_set(4 * 512, 512, 3))
                     if size == "spp" else conv_set(1024, 512))
        self.out5 = dconv(512, 1024, 3)
        self.lat4 = dconv(512, 256, 1)
        self.set4 = conv_set(256 + 512, 256)
        self.out4 = dconv(256, 512, 3)
        self.lat3 = dconv(256, 128, 1)
        self.set3 = conv_set(128 + 256, 128)
        self.out3 = dconv(128, 256, 3)
        self.up = nn.Upsample(scale_factor=2.0, mode="nearest")
        self.head = AnchorHead(nc=nc, ch=(256, 512, 1024), anchors=ANCHORS, strides=STRIDES)
        self.head.init_bias(imgsz=IMGSZ)

    def forward(self, x: Tensor) -> list[Tensor]:
        c3, c4, c5 = self.backbone(x)
        r5 = self.set5(c5)  # (B, 512, H/32, W/32)
        r4 = self.set4(torch.cat((self.up(self.lat4(r5)), c4), 1))  # (B, 256, H/16, W/16)
        r3 = self.set3(torch.cat((self.up(self.lat3(r4)), c3), 1))  # (B, 128, H/8, W/8)
        return self.head([self.out3(r3), self.out4(r4), self.out5(r5)])

    def darknet_order(self) -> list[nn.Module]:
        """Modules in ``yolov3.cfg`` layer order (the output convs interleaved, stride 32 first)."""
        m = self.head.m
        return [self.backbone, self.set5, self.out5, m[2], self.lat4, self.set4, self.out4, m[1],
                self.lat3, self.set3, self.out3, m[0]]

    def fuse(self) -> YOLO3Net:
        """Fold every BatchNorm into its conv, in place (eval outputs kept within float tolerance)."""
        fuse_modules(self)
        return self


def build_yolo3(*, size: str = "b", nc: int) -> nn.Module:
    """Build an untrained YOLOv3 (size ``b``: the paper's YOLOv3-416; ``spp``: YOLOv3-SPP;
    ``tiny``: YOLOv3-tiny, two levels at strides 16 and 32) with ``nc`` classes."""
    if size not in SIZES:
        raise ConfigError(f"yolo3 has no size {size!r}; sizes: {', '.join(SIZES)}")
    if isinstance(nc, bool) or not isinstance(nc, int) or nc < 1:
        raise ConfigError(f"nc must be a positive int, got {nc!r}")
    if size == "tiny":
        return TinyYOLONet(backbone=TinyDarknet(), c32=1024, nc=nc, size=size, family_name="yolo3",
                           anchors=TINY_ANCHORS, scale_xy=(1.0, 1.0), imgsz=IMGSZ)
    return YOLO3Net(nc=nc, size=size)
