"""The YOLOv9 GELAN detection network of the lineage: backbone, PAN neck (optionally extended to a
stride-4 level) and the anchor-free decoupled DFL head.

Contract of :class:`YOLO9Net` with the default :class:`DetectHead` (the rest of the library
depends on it): input Tensor[B, 3, H, W] float in [0, 1], H and W multiples of 32; output, in train
and eval mode alike, a list of one tensor per level (strides 8, 16, 32; with a :class:`P2Neck`
4, 8, 16, 32), each Tensor[B, 4 * reg_max + nc, H / s, W / s] of raw logits (box distribution
logits first, then class logits). Decoding is postprocessing (:mod:`.postprocess`), so the forward
is static and CUDA-graph capturable. Another head (``head_cls``) may define its own output list
(the one-to-one head of ``yolo9_e2e``).
"""

from __future__ import annotations

import math
from collections.abc import Callable, Iterable
from dataclasses import dataclass

import torch
from torch import Tensor, nn

from ...errors import ConfigError
from ...layers.conv import ConvBNAct, fuse_modules
from .elan import ELAN1, SPPELAN, AConv, ADown, RepNCSPELAN4
from .variants import ELANArgs, YOLO9Variant

REG_MAX = 16
STRIDES = (8, 16, 32)
STRIDES_P2 = (4, 8, 16, 32)


@dataclass(frozen=True, kw_only=True)
class P2Neck:
    """The neck's extension to a stride-4 output (the P2 variant): after the stride-8 top-down
    block, one more top-down step (upsample, concatenate the stride-4 backbone feature, ``top2``
    ELAN = the stride-4 output), then one more bottom-up step (``down3`` downsampler, concatenate
    the stride-8 top-down feature, ``bottom3`` ELAN = the stride-8 output).
    """

    top2: ELANArgs
    down3: int
    bottom3: ELANArgs


def _make_divisible(x: int, divisor: int) -> int:
    return math.ceil(x / divisor) * divisor


def _elan(c_in: int, args: ELANArgs) -> RepNCSPELAN4:
    c_out, c_hidden, c_branch, depth = args
    return RepNCSPELAN4(c_in, c_out, c_hidden, c_branch, depth)


def _down(kind: str, c_in: int, c_out: int) -> nn.Module:
    return ADown(c_in, c_out) if kind == "adown" else AConv(c_in, c_out)


def _cls_branch(c: int, c_cls: int, nc: int, *, light: bool) -> nn.Sequential:
    if light:  # depthwise 3x3 + pointwise 1x1, twice (same nesting as the reference's keys)
        return nn.Sequential(nn.Sequential(ConvBNAct(c, c, 3, g=c), ConvBNAct(c, c_cls, 1)),
                             nn.Sequential(ConvBNAct(c_cls, c_cls, 3, g=c_cls), ConvBNAct(c_cls, c_cls, 1)),
                             nn.Conv2d(c_cls, nc, 1))
    return nn.Sequential(ConvBNAct(c, c_cls, 3), ConvBNAct(c_cls, c_cls, 3), nn.Conv2d(c_cls, nc, 1))


class DetectHead(nn.Module):
    """Anchor-free decoupled head with DFL box regression, one branch pair per level.

    Box branch: 3x3 conv, grouped (g=4) 3x3 conv, grouped 1x1 conv to ``4 * reg_max``
    (``box_groups=1``: ungrouped, the layout of Ultralytics' YOLOv9 ``Detect``, for its checkpoints).
    Class branch: 3x3 conv, 3x3 conv, 1x1 conv to ``nc`` (``light_cls=True``: each 3x3 conv becomes
    a depthwise 3x3 followed by a 1x1, the light classification branch of YOLOv10). Widths:
    ``c_box = ceil4(max(ch[0] // 4, 4 * reg_max, 16))`` (reference rule) and
    ``c_cls = max(ch[0], min(nc, 100))`` (the rule of the released YOLOv9-T model, whose class
    branch is 80 wide at 80 classes; the reference code's ``min(2 * nc, 128)`` gives 128 there and
    2.4M parameters instead of the paper's 2.0M. Sizes s, m, c are identical under both rules
    because ``ch[0] >= 128``).

    feats ([Tensor[B, ch_i, h_i, w_i]]) -> [Tensor[B, 4 * reg_max + nc, h_i, w_i]].
    """

    def __init__(self, *, nc: int, ch: tuple[int, ...], reg_max: int = REG_MAX,
                 strides: tuple[int, ...] = STRIDES, box_groups: int = 4, light_cls: bool = False) -> None:
        super().__init__()
        if len(ch) != len(strides):
            raise ConfigError(f"DetectHead got {len(ch)} input widths for {len(strides)} strides; give one per level")
        self.nc = nc
        self.reg_max = reg_max
        self.strides = tuple(strides)
        self.box_groups = int(box_groups)
        self.light_cls = bool(light_cls)
        c_box = _make_divisible(max(ch[0] // 4, 4 * reg_max, 16), 4)
        c_cls = max(ch[0], min(nc, 100))
        g = self.box_groups
        self.box = nn.ModuleList(
            nn.Sequential(ConvBNAct(c, c_box, 3), ConvBNAct(c_box, c_box, 3, g=g),
                          nn.Conv2d(c_box, 4 * reg_max, 1, groups=g))
            for c in ch
        )
        self.cls = nn.ModuleList(_cls_branch(c, c_cls, nc, light=self.light_cls) for c in ch)

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
    """GELAN detector of one size (see :mod:`.variants`), optionally with the stride-4 neck
    extension (``p2_neck``) and another head (``head_cls``, built with the same keywords as
    :class:`DetectHead`).

    Attributes: ``nc``, ``reg_max`` (16), ``strides`` ((8, 16, 32) or with ``p2_neck`` (4, 8, 16,
    32)), ``size``.

    x (Tensor[B, 3, H, W], float in [0, 1], H and W multiples of 32) -> the head's output; with
    :class:`DetectHead` [Tensor[B, 4 * reg_max + nc, H / s, W / s] for each stride s], raw logits.
    """

    def __init__(self, variant: YOLO9Variant, *, nc: int, box_groups: int = 4, p2_neck: P2Neck | None = None,
                 head_cls: Callable[..., nn.Module] | None = None) -> None:
        super().__init__()
        v = variant
        self.size = v.size
        self.nc = nc
        self.reg_max = REG_MAX
        self.strides = STRIDES if p2_neck is None else STRIDES_P2
        # backbone ----------------------------------------------------------------------
        self.stem1 = ConvBNAct(3, v.stem[0], 3, 2)  # P1/2
        self.stem2 = ConvBNAct(v.stem[0], v.stem[1], 3, 2)  # P2/4
        if v.p2_block == "elan1":
            c_out, c_hidden, c_branch, _ = v.p2
            self.p2: nn.Module = ELAN1(v.stem[1], c_out, c_hidden, c_branch)
        else:
            self.p2 = _elan(v.stem[1], v.p2)
        c2 = v.p2[0]
        self.down3 = _down(v.down, c2, v.backbone_down[0])  # P3/8
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
        outs: tuple[int, ...] = ()
        self.top2: nn.Module | None = None
        if p2_neck is not None:  # stride-4 output, then back down to stride 8
            self.top2 = _elan(n3 + c2, p2_neck.top2)
            n2 = p2_neck.top2[0]
            self.bottom3_down = _down(v.down, n2, p2_neck.down3)
            self.bottom3 = _elan(p2_neck.down3 + n3, p2_neck.bottom3)
            outs, n3 = (n2,), p2_neck.bottom3[0]
        self.bottom4_down = _down(v.down, n3, v.neck_down[0])
        self.bottom4 = _elan(v.neck_down[0] + t4, v.neck_out[0])
        n4 = v.neck_out[0][0]
        self.bottom5_down = _down(v.down, n4, v.neck_down[1])
        self.bottom5 = _elan(v.neck_down[1] + c5, v.neck_out[1])
        n5 = v.neck_out[1][0]
        # head --------------------------------------------------------------------------
        make = head_cls or DetectHead
        self.head = make(nc=nc, ch=(*outs, n3, n4, n5), reg_max=self.reg_max, strides=self.strides,
                         box_groups=box_groups)
        self.head.init_bias()

    def forward(self, x: Tensor) -> list[Tensor]:
        f2 = self.p2(self.stem2(self.stem1(x)))  # stride 4
        p3 = self.elan3(self.down3(f2))  # stride 8
        p4 = self.elan4(self.down4(p3))  # stride 16
        p5 = self.spp(self.elan5(self.down5(p4)))  # stride 32
        t4 = self.top4(torch.cat((self.up(p5), p4), 1))
        n3 = self.top3(torch.cat((self.up(t4), p3), 1))
        feats: list[Tensor] = []
        if self.top2 is not None:  # structure, fixed at build time (not data-dependent)
            n2 = self.top2(torch.cat((self.up(n3), f2), 1))
            n3 = self.bottom3(torch.cat((self.bottom3_down(n2), n3), 1))
            feats.append(n2)
        n4 = self.bottom4(torch.cat((self.bottom4_down(n3), t4), 1))
        n5 = self.bottom5(torch.cat((self.bottom5_down(n4), p5), 1))
        return self.head([*feats, n3, n4, n5])

    def fuse(self) -> YOLO9Net:
        """Fold BatchNorms into convs and merge RepConvN branches, in place, for inference.

        Outputs equal the unfused eval-mode outputs within float tolerance. Parameters are
        replaced (optimizers / captured graphs holding the old ones must be rebuilt) and the
        fused network can no longer train its BatchNorms.
        """
        fuse_modules(self)
        return self


def check_build_args(family: str, *, size: str, nc: int, sizes: Iterable[str], box_groups: int = 4) -> None:
    """One-line :class:`ConfigError` for an unknown size, a bad ``nc`` or ``box_groups``.

    Example:
        >>> check_build_args("yolo9", size="t", nc=80, sizes=("t", "s"))
        >>> check_build_args("yolo9", size="x", nc=80, sizes=("t", "s"))
        Traceback (most recent call last):
        ...
        libreyolo.errors.ConfigError: yolo9 has no size 'x'; sizes: t, s
    """
    sizes = tuple(sizes)
    if size not in sizes:
        raise ConfigError(f"{family} has no size {size!r}; sizes: {', '.join(sizes)}")
    if isinstance(nc, bool) or not isinstance(nc, int) or nc < 1:
        raise ConfigError(f"nc must be a positive int, got {nc!r}")
    if box_groups not in (1, 4):
        raise ConfigError(f"box_groups must be 4 (original YOLOv9 head) or 1 (Ultralytics' head), got {box_groups!r}")
