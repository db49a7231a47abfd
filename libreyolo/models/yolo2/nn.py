"""YOLOv2 detection network (the paper's YOLOv2 at 416, size ``b``; ``yolov2.cfg``): Darknet-19
without its classifier, two 3x3 convs, the passthrough (a 1x1 conv on the stride-16 features,
Darknet's reorg, concatenated in front of the stride-32 features), a 3x3 conv and one output
conv for five anchors, LeakyReLU(0.1) throughout, softmax classes.

Contract: input Tensor[B, 3, H, W] float in [0, 1] RGB, H and W multiples of 32; output, in
train and eval mode alike, a list of one Tensor[B, 5 * (5 + nc), H / 32, W / 32] of raw logits
laid out ``(anchor, field)`` (``tx, ty, tw, th, obj, classes``; Darknet's ``[region]`` layout).
Decoding lives in :mod:`libreyolo.models._darknet.postprocess`.

Modules are created in ``yolov2.cfg`` layer order (:meth:`YOLO2Net.darknet_order`).
"""

from __future__ import annotations

import torch
from torch import Tensor, nn

from ...errors import ConfigError
from ...layers.conv import fuse_modules
from .._darknet.blocks import Reorg, dconv
from .._darknet.head import AnchorHead

STRIDES = (32,)
# The COCO anchors of yolov2.cfg are in grid cells of stride 32; here in input pixels (x 32).
GRID_ANCHORS = ((0.57273, 0.677385), (1.87446, 2.06253), (3.33843, 5.47434), (7.88282, 3.52778), (9.77052, 9.16828))
ANCHORS = (tuple((w * 32, h * 32) for w, h in GRID_ANCHORS),)
IMGSZ = 416
SIZES = ("b",)
PAPER_PARAMS_M = 50.7  # the quoted count is the 416 cfg at 20 (VOC) classes: 50,655,389; at 80 (COCO) 50,962,889


def _darknet19_body() -> tuple[nn.Sequential, nn.Sequential]:
    """Darknet-19 up to its stride-16 output (``conv 13``) and the stride-32 rest (``conv 18``)."""
    spec16 = ["c32", "m", "c64", "m", "c128", "p64", "c128", "m", "c256", "p128", "c256", "m",
              "c512", "p256", "c512", "p256", "c512"]
    spec32 = ["m", "c1024", "p512", "c1024", "p512", "c1024"]

    def build(spec: list[str], c: int) -> tuple[nn.Sequential, int]:
        layers: list[nn.Module] = []
        for s in spec:
            if s == "m":
                layers.append(nn.MaxPool2d(2, 2))
            else:
                co = int(s[1:])
                layers.append(dconv(c, co, 3 if s[0] == "c" else 1))
                c = co
        return nn.Sequential(*layers), c

    a, c = build(spec16, 3)
    b, _ = build(spec32, c)
    return a, b


class YOLO2Net(nn.Module):
    """YOLOv2; see the module docstring for the contract.

    Example:
        >>> net = build_yolo2(size="b", nc=80).eval()
        >>> [tuple(o.shape) for o in net(torch.zeros(1, 3, 64, 64))]
        [(1, 425, 2, 2)]
    """

    family_name = "yolo2"

    def __init__(self, *, nc: int, size: str = "b") -> None:
        super().__init__()
        self.size, self.nc, self.strides = size, nc, STRIDES
        self.body16, self.body32 = _darknet19_body()
        self.extra = nn.Sequential(dconv(1024, 1024, 3), dconv(1024, 1024, 3))
        self.passthrough = dconv(512, 64, 1)
        self.reorg = Reorg()
        self.fuse_conv = dconv(256 + 1024, 1024, 3)
        self.head = AnchorHead(nc=nc, ch=(1024,), anchors=ANCHORS, strides=STRIDES, cls_act="softmax")
        self.head.init_bias(imgsz=IMGSZ)

    def forward(self, x: Tensor) -> list[Tensor]:
        c4 = self.body16(x)  # (B, 512, H/16, W/16)
        c5 = self.extra(self.body32(c4))  # (B, 1024, H/32, W/32)
        y = torch.cat((self.reorg(self.passthrough(c4)), c5), 1)  # cfg: route -1, -4 (reorg first)
        return self.head([self.fuse_conv(y)])

    def darknet_order(self) -> list[nn.Module]:
        """Modules in ``yolov2.cfg`` layer order."""
        return [self.body16, self.body32, self.extra, self.passthrough, self.fuse_conv, self.head.m[0]]

    def fuse(self) -> YOLO2Net:
        """Fold every BatchNorm into its conv, in place."""
        fuse_modules(self)
        return self


def build_yolo2(*, size: str = "b", nc: int) -> YOLO2Net:
    """Build an untrained YOLOv2 (size ``b``: the paper's YOLOv2 416) with ``nc`` classes."""
    if size not in SIZES:
        raise ConfigError(f"yolo2 has no size {size!r}; sizes: {', '.join(SIZES)}")
    if isinstance(nc, bool) or not isinstance(nc, int) or nc < 1:
        raise ConfigError(f"nc must be a positive int, got {nc!r}")
    return YOLO2Net(nc=nc, size=size)
