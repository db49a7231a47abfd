"""YOLOv9 GELAN detection network (sizes t, s, m, c): backbone, PAN neck and the anchor-free
decoupled DFL head.

Contract (the rest of the library depends on it): input Tensor[B, 3, H, W] float in [0, 1],
H and W multiples of 32; output, in train and eval mode alike, a list of three tensors for
strides 8, 16, 32, each Tensor[B, 4 * reg_max + nc, H / s, W / s] of raw logits (box
distribution logits first, then class logits). Decoding is postprocessing
(:mod:`libreyolo.models.yolo9.postprocess`), so the forward is static and CUDA-graph capturable.
"""

from __future__ import annotations

import math

import torch
from torch import Tensor, nn

from ...errors import ConfigError
from ...layers.conv import ConvBNAct, fuse_modules
from .elan import ELAN1, SPPELAN, AConv, ADown, RepNCSPELAN4
from .variants import VARIANTS, ELANArgs, YOLO9Variant

REG_MAX = 16
STRIDES = (8, 16, 32)

# Attribute name -> layer index of the reference model (``model.<i>.`` state-dict prefix), for
# converting reference checkpoints: rename the prefix; inside the head ``cv2`` -> ``box``,
# ``cv3`` -> ``cls`` and drop ``dfl.conv.weight`` (a constant; decoding lives in postprocess).
REFERENCE_LAYER_INDEX: dict[str, int] = {
    "stem1": 0, "stem2": 1, "p2": 2, "down3": 3, "elan3": 4, "down4": 5, "elan4": 6, "down5": 7,
    "elan5": 8, "spp": 9, "top4": 12, "top3": 15, "bottom4_down": 16, "bottom4": 18,
    "bottom5_down": 19, "bottom5": 21, "head": 22,
}


def _make_divisible(x: int, divisor: int) -> int:
    return math.ceil(x / divisor) * divisor


def _elan(c_in: int, args: ELANArgs) -> RepNCSPELAN4:
    c_out, c_hidden, c_branch, depth = args
    return RepNCSPELAN4(c_in, c_out, c_hidden, c_branch, depth)


def _down(kind: str, c_in: int, c_out: int) -> nn.Module:
    return ADown(c_in, c_out) if kind == "adown" else AConv(c_in, c_out)


class DetectHead(nn.Module):
    """Anchor-free decoupled head with DFL box regression, one branch pair per level.

    Box branch: 3x3 conv, grouped (g=4) 3x3 conv, grouped 1x1 conv to ``4 * reg_max``
    (``box_groups=1``: ungrouped, the layout of Ultralytics' YOLOv9 ``Detect``, for its checkpoints).
    Class branch: 3x3 conv, 3x3 conv, 1x1 conv to ``nc``. Widths:
    ``c_box = ceil4(max(ch[0] // 4, 4 * reg_max, 16))`` (reference rule) and
    ``c_cls = max(ch[0], min(nc, 100))`` (the rule of the released YOLOv9-T model, whose class
    branch is 80 wide at 80 classes; the reference code's ``min(2 * nc, 128)`` gives 128 there and
    2.4M parameters instead of the paper's 2.0M. Sizes s, m, c are identical under both rules
    because ``ch[0] >= 128``).

    feats ([Tensor[B, ch_i, h_i, w_i]]) -> [Tensor[B, 4 * reg_max + nc, h_i, w_i]].
    """

    def __init__(self, *, nc: int, ch: tuple[int, ...], reg_max: int = REG_MAX,
                 strides: tuple[int, ...] = STRIDES, box_groups: int = 4) -> None:
        super().__init__()
        self.nc = nc
        self.reg_max = reg_max
        self.strides = tuple(strides)
        self.box_groups = int(box_groups)
        c_box = _make_divisible(max(ch[0] // 4, 4 * reg_max, 16), 4)
        c_cls = max(ch[0], min(nc, 100))
        g = self.box_groups
        self.box = nn.ModuleList(
            nn.Sequential(ConvBNAct(c, c_box, 3), ConvBNAct(c_box, c_box, 3, g=g),
                          nn.Conv2d(c_box, 4 * reg_max, 1, groups=g))
            for c in ch
        )
        self.cls = nn.ModuleList(
            nn.Sequential(ConvBNAct(c, c_cls, 3), ConvBNAct(c_cls, c_cls, 3),
                          nn.Conv2d(c_cls, nc, 1))
            for c in ch
        )

    @torch.no_grad()
    def init_bias(self, *, imgsz: int = 640) -> None:
        """Box logits start flat (bias 1.0); class logits start at the prior of ~5 objects of
        ``nc`` classes per ``imgsz`` image: ``log(5 / nc / (imgsz / s) ** 2)``."""
        for box, cls, s in zip(self.box, self.cls, self.strides, strict=True):
            box[-1].bias.fill_(1.0)
            cls[-1].bias.fill_(math.log(5 / self.nc / (imgsz / s) ** 2))

    def forward(self, feats: list[Tensor]) -> list[Tensor]:
        levels = zip(feats, self.box, self.cls, strict=True)
        return [torch.cat((box(x), cls(x)), 1) for x, box, cls in levels]


class YOLO9Net(nn.Module):
    """GELAN detector of one size (see :mod:`libreyolo.models.yolo9.variants`).

    Attributes: ``nc``, ``reg_max`` (16), ``strides`` ((8, 16, 32)), ``size``.

    x (Tensor[B, 3, H, W], float in [0, 1], H and W multiples of 32) ->
    [Tensor[B, 4 * reg_max + nc, H / s, W / s] for s in (8, 16, 32)], raw logits.
    """

    def __init__(self, variant: YOLO9Variant, *, nc: int, box_groups: int = 4) -> None:
        super().__init__()
        v = variant
        self.size = v.size
        self.nc = nc
        self.reg_max = REG_MAX
        self.strides = STRIDES
        # backbone ----------------------------------------------------------------------
        self.stem1 = ConvBNAct(3, v.stem[0], 3, 2)  # P1/2
        self.stem2 = ConvBNAct(v.stem[0], v.stem[1], 3, 2)  # P2/4
        if v.p2_block == "elan1":
            c_out, c_hidden, c_branch, _ = v.p2
            self.p2: nn.Module = ELAN1(v.stem[1], c_out, c_hidden, c_branch)
        else:
            self.p2 = _elan(v.stem[1], v.p2)
        c = v.p2[0]
        self.down3 = _down(v.down, c, v.backbone_down[0])  # P3/8
        self.elan3 = _elan(v.backbone_down[0], v.backbone[0])
        c3 = v.backbone[0][0]
        self.down4 = _down(v.down, c3, v.backbone_down[1])  # P4/16
        self.elan4 = _elan(v.backbone_down[1], v.backbone[1])
        c4 = v.backbone[1][0]
        self.down5 = _down(v.down, c4, v.backbone_down[2])  # P5/32
        self.elan5 = _elan(v.backbone_down[2], v.backbone[2])
        # neck --------------------------------------------------------------------------
        self.spp = SPPELAN(v.backbone[2][0], v.spp[0], v.spp[1])
        c5 = v.spp[0]
        self.up = nn.Upsample(scale_factor=2.0, mode="nearest")
        self.top4 = _elan(c5 + c4, v.neck_up[0])
        t4 = v.neck_up[0][0]
        self.top3 = _elan(t4 + c3, v.neck_up[1])
        n3 = v.neck_up[1][0]
        self.bottom4_down = _down(v.down, n3, v.neck_down[0])
        self.bottom4 = _elan(v.neck_down[0] + t4, v.neck_out[0])
        n4 = v.neck_out[0][0]
        self.bottom5_down = _down(v.down, n4, v.neck_down[1])
        self.bottom5 = _elan(v.neck_down[1] + c5, v.neck_out[1])
        n5 = v.neck_out[1][0]
        # head --------------------------------------------------------------------------
        self.head = DetectHead(nc=nc, ch=(n3, n4, n5), reg_max=self.reg_max, strides=self.strides,
                               box_groups=box_groups)
        self.head.init_bias()

    def forward(self, x: Tensor) -> list[Tensor]:
        x = self.p2(self.stem2(self.stem1(x)))
        p3 = self.elan3(self.down3(x))  # stride 8
        p4 = self.elan4(self.down4(p3))  # stride 16
        p5 = self.spp(self.elan5(self.down5(p4)))  # stride 32
        t4 = self.top4(torch.cat((self.up(p5), p4), 1))
        n3 = self.top3(torch.cat((self.up(t4), p3), 1))
        n4 = self.bottom4(torch.cat((self.bottom4_down(n3), t4), 1))
        n5 = self.bottom5(torch.cat((self.bottom5_down(n4), p5), 1))
        return self.head([n3, n4, n5])

    def fuse(self) -> YOLO9Net:
        """Fold BatchNorms into convs and merge RepConvN branches, in place, for inference.

        Outputs equal the unfused eval-mode outputs within float tolerance. Parameters are
        replaced (optimizers / captured graphs holding the old ones must be rebuilt) and the
        fused network can no longer train its BatchNorms.
        """
        fuse_modules(self)
        return self


def build_yolo9(*, size: str, nc: int, box_groups: int = 4) -> YOLO9Net:
    """Build an untrained YOLOv9 (GELAN) detector (``box_groups``: see :class:`DetectHead`).

    Example:
        >>> net = build_yolo9(size="t", nc=80)
        >>> [o.shape[1:] for o in net(torch.zeros(1, 3, 64, 64))]
        [torch.Size([144, 8, 8]), torch.Size([144, 4, 4]), torch.Size([144, 2, 2])]
    """
    if size not in VARIANTS:
        raise ConfigError(f"yolo9 has no size {size!r}; sizes: {', '.join(VARIANTS)}")
    if isinstance(nc, bool) or not isinstance(nc, int) or nc < 1:
        raise ConfigError(f"nc must be a positive int, got {nc!r}")
    if box_groups not in (1, 4):
        raise ConfigError(f"box_groups must be 4 (original YOLOv9 head) or 1 (Ultralytics' head), got {box_groups!r}")
    return YOLO9Net(VARIANTS[size], nc=nc, box_groups=box_groups)
