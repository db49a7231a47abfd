"""YOLOv4 detection network (the paper's YOLOv4 at 608, size ``b``): CSPDarknet53 backbone
(Mish), SPP block and PANet neck (LeakyReLU(0.1)), the YOLOv3 anchor head on three scales with
the grid-sensitivity factors ``scale_xy`` 1.2 / 1.1 / 1.05 (strides 8 / 16 / 32).

Contract: input Tensor[B, 3, H, W] float in [0, 1] RGB, H and W multiples of 32; output, in
train and eval mode alike, a list of three Tensor[B, 3 * (5 + nc), H / s, W / s] raw logits for
strides 8, 16, 32, laid out ``(anchor, field)`` (``tx, ty, tw, th, obj, classes``). Decoding
lives in :mod:`libreyolo.models._darknet.postprocess`.

Modules are created in the order of the reference ``yolov4.cfg`` layers;
:meth:`YOLO4Net.darknet_order` lists them in that order for the Darknet ``.weights`` reader.
"""

from __future__ import annotations

import torch
from torch import Tensor, nn

from ...errors import ConfigError
from ...layers.conv import fuse_modules
from .._darknet.blocks import CSPDarknet53, PoolPyramid, conv_set, dconv
from .._darknet.head import AnchorHead
from .._darknet.tiny import TinyCSPDarknet, TinyYOLONet

STRIDES = (8, 16, 32)
# The COCO anchors of yolov4.cfg, in input pixels, per level of stride 8, 16, 32.
ANCHORS = (((12, 16), (19, 36), (40, 28)), ((36, 75), (76, 55), (72, 146)), ((142, 110), (192, 243), (459, 401)))
SCALE_XY = (1.2, 1.1, 1.05)
IMGSZ = 608
SIZES = ("tiny", "b")  # smallest first, as the other families
PAPER_PARAMS_M = {"b": 64.4, "tiny": 6.1}  # commonly quoted; yolov4.cfg / yolov4-tiny.cfg: 64,363,101 / 6,062,814
# yolov4-tiny.cfg: masks 1,2,3 (stride 16) and 3,4,5 (stride 32) of its six anchors; scale_x_y 1.05
TINY_ANCHORS = (((23, 27), (37, 58), (81, 82)), ((81, 82), (135, 169), (344, 319)))
TINY_IMGSZ = 416


class YOLO4Net(nn.Module):
    """YOLOv4; see the module docstring for the contract. Attributes as :class:`YOLO3Net`'s.

    Example:
        >>> net = build_yolo4(size="b", nc=80).eval()
        >>> [tuple(o.shape) for o in net(torch.zeros(1, 3, 64, 64))]
        [(1, 255, 8, 8), (1, 255, 4, 4), (1, 255, 2, 2)]
    """

    family_name = "yolo4"

    def __init__(self, *, nc: int, size: str = "b") -> None:
        super().__init__()
        self.size, self.nc, self.strides = size, nc, STRIDES
        self.backbone = CSPDarknet53()
        self.pre_spp = conv_set(1024, 512, 3)
        self.spp = PoolPyramid((5, 9, 13))
        self.post_spp = conv_set(4 * 512, 512, 3)  # P5 of the neck
        self.lat5 = dconv(512, 256, 1)
        self.route4 = dconv(512, 256, 1)
        self.td4 = conv_set(512, 256)  # top-down P4
        self.lat4 = dconv(256, 128, 1)
        self.route3 = dconv(256, 128, 1)
        self.td3 = conv_set(256, 128)  # top-down P3 = bottom-up P3
        self.out3 = dconv(128, 256, 3)
        self.down3 = dconv(128, 256, 3, 2)
        self.bu4 = conv_set(512, 256)  # bottom-up P4
        self.out4 = dconv(256, 512, 3)
        self.down4 = dconv(256, 512, 3, 2)
        self.bu5 = conv_set(1024, 512)  # bottom-up P5
        self.out5 = dconv(512, 1024, 3)
        self.up = nn.Upsample(scale_factor=2.0, mode="nearest")
        self.head = AnchorHead(nc=nc, ch=(256, 512, 1024), anchors=ANCHORS, strides=STRIDES, scale_xy=SCALE_XY)
        self.head.init_bias(imgsz=IMGSZ)

    def forward(self, x: Tensor) -> list[Tensor]:
        c3, c4, c5 = self.backbone(x)
        p5 = self.post_spp(self.spp(self.pre_spp(c5)))  # (B, 512, H/32, W/32)
        t4 = self.td4(torch.cat((self.route4(c4), self.up(self.lat5(p5))), 1))  # (B, 256, H/16, W/16)
        n3 = self.td3(torch.cat((self.route3(c3), self.up(self.lat4(t4))), 1))  # (B, 128, H/8, W/8)
        n4 = self.bu4(torch.cat((self.down3(n3), t4), 1))  # (B, 256, H/16, W/16)
        n5 = self.bu5(torch.cat((self.down4(n4), p5), 1))  # (B, 512, H/32, W/32)
        return self.head([self.out3(n3), self.out4(n4), self.out5(n5)])

    def darknet_order(self) -> list[nn.Module]:
        """Modules in ``yolov4.cfg`` layer order (output convs interleaved, stride 8 first)."""
        m = self.head.m
        return [self.backbone, self.pre_spp, self.post_spp, self.lat5, self.route4, self.td4, self.lat4,
                self.route3, self.td3, self.out3, m[0], self.down3, self.bu4, self.out4, m[1], self.down4,
                self.bu5, self.out5, m[2]]

    def fuse(self) -> YOLO4Net:
        """Fold every BatchNorm into its conv, in place (eval outputs kept within float tolerance)."""
        fuse_modules(self)
        return self


def build_yolo4(*, size: str = "b", nc: int) -> nn.Module:
    """Build an untrained YOLOv4 (size ``b``: the paper's YOLOv4, 608 px; ``tiny``: YOLOv4-tiny,
    two levels at strides 16 and 32) with ``nc`` classes."""
    if size not in SIZES:
        raise ConfigError(f"yolo4 has no size {size!r}; sizes: {', '.join(SIZES)}")
    if isinstance(nc, bool) or not isinstance(nc, int) or nc < 1:
        raise ConfigError(f"nc must be a positive int, got {nc!r}")
    if size == "tiny":
        return TinyYOLONet(backbone=TinyCSPDarknet(), c32=512, nc=nc, size=size, family_name="yolo4",
                           anchors=TINY_ANCHORS, scale_xy=(1.05, 1.05), imgsz=TINY_IMGSZ)
    return YOLO4Net(nc=nc, size=size)
