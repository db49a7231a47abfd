"""YOLOv9 (GELAN) instance-segmentation network: the lineage's :class:`YOLO9Net` with a
:class:`SegmentHead` (the detection head, one mask-coefficient branch per level and a prototype
branch at stride 4).

Contract (the rest of the library depends on it): input Tensor[B, 3, H, W] float in [0, 1], H and
W multiples of 32; output, in train and eval mode alike, a list of four tensors: for strides 8,
16, 32 Tensor[B, 4 * reg_max + nc + nm, H / s, W / s] (box-distribution logits, class logits, then
the ``nm`` mask coefficients), then the prototypes Tensor[B, nm, H / 4, W / 4]. Everything past
the network (NMS, mask assembly) is eager postprocessing, so the forward is static and
CUDA-graph capturable.
"""

from __future__ import annotations

import functools
from dataclasses import dataclass

import torch
from torch import Tensor, nn

from ...layers.conv import ConvBNAct
from .._gelan.net import REG_MAX, STRIDES, DetectHead, YOLO9Net, check_build_args
from .._gelan.variants import VARIANTS as GELAN_VARIANTS
from .._gelan.variants import YOLO9Variant

NM = 32  # mask coefficients = prototypes per image


@dataclass(frozen=True, kw_only=True)
class SegVariant:
    """One size: the GELAN detector of that size and the hidden width of its prototype branch
    (``npr``; Ultralytics' ``Segment(nc, 32, npr)``)."""

    gelan: YOLO9Variant
    npr: int


# npr: c uses the 256 of Ultralytics' yolov9c-seg.yaml; t and s have no upstream config and take
# 256 scaled by the width factor Ultralytics applies to YOLOv8-seg's n and s (0.25, 0.5).
VARIANTS: dict[str, SegVariant] = {
    "t": SegVariant(gelan=GELAN_VARIANTS["t"], npr=64),
    "s": SegVariant(gelan=GELAN_VARIANTS["s"], npr=128),
    "c": SegVariant(gelan=GELAN_VARIANTS["c"], npr=256),
}


class Proto(nn.Module):
    """Prototype branch: 3x3 conv, 2x transposed conv (stride 8 -> 4), 3x3 conv, 1x1 conv to ``nm``.

    x (Tensor[B, c_in, h, w]) -> Tensor[B, nm, 2h, 2w].

    Example:
        >>> Proto(64, 32, 8)(torch.zeros(1, 64, 4, 4)).shape
        torch.Size([1, 8, 8, 8])
    """

    def __init__(self, c_in: int, npr: int, nm: int = NM) -> None:
        super().__init__()
        self.cv1 = ConvBNAct(c_in, npr, 3)
        self.upsample = nn.ConvTranspose2d(npr, npr, 2, 2, 0, bias=True)
        self.cv2 = ConvBNAct(npr, npr, 3)
        self.cv3 = ConvBNAct(npr, nm, 1)

    def forward(self, x: Tensor) -> Tensor:
        return self.cv3(self.cv2(self.upsample(self.cv1(x))))


class SegmentHead(DetectHead):
    """:class:`DetectHead` plus, per level, a coefficient branch (3x3 conv, 3x3 conv, 1x1 conv to
    ``nm``; width ``max(ch[0] // 4, nm)``) and a :class:`Proto` on the stride-8 feature.

    feats ([Tensor[B, ch_i, h_i, w_i]]) -> [Tensor[B, 4 * reg_max + nc + nm, h_i, w_i] per level,
    prototypes Tensor[B, nm, 2 h_0, 2 w_0]].
    """

    def __init__(self, *, nc: int, ch: tuple[int, ...], reg_max: int = REG_MAX, strides: tuple[int, ...] = STRIDES,
                 box_groups: int = 4, nm: int = NM, npr: int = 256) -> None:
        super().__init__(nc=nc, ch=ch, reg_max=reg_max, strides=strides, box_groups=box_groups)
        self.nm, self.npr = int(nm), int(npr)
        c_coef = max(ch[0] // 4, self.nm)
        self.coef = nn.ModuleList(
            nn.Sequential(ConvBNAct(c, c_coef, 3), ConvBNAct(c_coef, c_coef, 3), nn.Conv2d(c_coef, self.nm, 1))
            for c in ch
        )
        self.proto = Proto(ch[0], self.npr, self.nm)

    def forward(self, feats: list[Tensor]) -> list[Tensor]:  # type: ignore[override]
        levels = zip(feats, self.box, self.cls, self.coef, strict=True)
        out = [torch.cat((box(x), cls(x), coef(x)), 1) for x, box, cls, coef in levels]
        return [*out, self.proto(feats[0])]


def build_yolo9_seg(*, size: str, nc: int, box_groups: int = 4) -> YOLO9Net:
    """Build an untrained YOLOv9 instance-segmentation network (``box_groups``: 4 as YOLOv9's
    ``DDetect``, 1 as Ultralytics' ``Detect``).

    Example:
        >>> net = build_yolo9_seg(size="t", nc=3)
        >>> [tuple(o.shape[1:]) for o in net(torch.zeros(1, 3, 64, 64))]
        [(99, 8, 8), (99, 4, 4), (99, 2, 2), (32, 16, 16)]
    """
    check_build_args("yolo9_seg", size=size, nc=nc, sizes=VARIANTS, box_groups=box_groups)
    v = VARIANTS[size]
    net = YOLO9Net(v.gelan, nc=nc, box_groups=box_groups, head_cls=functools.partial(SegmentHead, nm=NM, npr=v.npr))
    net.nm = NM  # type: ignore[assignment]
    return net
