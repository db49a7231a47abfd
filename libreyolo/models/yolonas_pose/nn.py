"""YOLO-NAS-Pose network (sizes n, s, m, l): the YOLO-NAS lineage trunk
(:mod:`libreyolo.models._yolonas.net`) and one :class:`NASPoseHead` per level.

Contract (the rest of the library depends on it): input Tensor[B, 3, H, W] float in [0, 1], H and
W multiples of 32; output, in train and eval mode alike, a list of three tensors, for strides 8,
16, 32 Tensor[B, 4 * 17 + nc + 3 * nkpt, H / s, W / s]: box-distribution logits (side-major
``(l, t, r, b) x 17`` bins), class logits, then per keypoint ``(x, y, visibility logit)`` raw
values (the dense-pose layout of :mod:`libreyolo.models._gelan.pose`). A keypoint of the anchor
at grid cell (i, j) of stride s decodes to ``x = (raw_x + j) * s``, ``y = (raw_y + i) * s`` input
pixels (``kpt_scale = 1``: super-gradients' ``(offset + anchor - 0.5) * stride`` with
``pose_offset_multiplier`` 1 and ``compensate_grid_cell_offset``) and ``sigmoid(raw_v)``.
Decoding is postprocessing, so the forward is static (CUDA-graph capturable).
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import torch
from torch import Tensor, nn

from ...errors import ConfigError
from ...layers.conv import ConvBNAct
from .._yolonas.blocks import QARepVGGBlock, relu
from .._yolonas.net import STRIDES, NASTrunk, fuse_nas
from .._yolonas.variants import VARIANTS as NAS_VARIANTS
from .._yolonas.variants import NASVariant, head_width

__all__ = ["NKPT", "REG_MAX", "STRIDES", "VARIANTS", "NASPoseHead", "NASPoseHeads", "NASPoseVariant",
           "YOLONASPoseNet", "build_yolonas_pose", "reference_param_count"]

NKPT = 17  # default keypoint count (COCO persons); a dataset's kpt_shape rebuilds the head
REG_MAX = 17  # distribution bins per side (the reference's reg_max 16 + 1)
PRIOR_PROB = 0.01  # initial class and keypoint-visibility probability (the reference's prior_prob)
BN_EPS = 1e-6  # the pose arch files' bn_eps (YOLO-NAS detection: 1e-3)


@dataclass(frozen=True, kw_only=True)
class NASPoseVariant:
    """One size of YOLO-NAS-Pose (super-gradients 3.7.1 ``yolo_nas_pose_{n,s,m,l}_arch_params.yaml``).

    trunk: the backbone + PAN neck (for s, m, l the YOLO-NAS detector's, unchanged; only its
        stem / stage / SPP / neck fields are read here).
    width_mult: the heads' width multiplier (widths rounded up to a multiple of 8).
    bbox_inter, pose_inter: per-level widths of the box/class branch and of the pose branch
        before ``width_mult``; pose_blocks: 3x3 convs of the pose branch per level.
    bn_momentum: the yaml's ``bn_momentum`` (every BatchNorm; eps is :data:`BN_EPS`).
    paper_params_m: the model card's parameter count (millions; 1 class, 17 keypoints);
    paper_counts: which count it matches: ``"reference"``, super-gradients' trainable module,
        i.e. our unfused network plus the unused merged ``rbr_reparam`` conv (3x3 weight and bias)
        that each of its QARepVGG blocks carries (:func:`reference_param_count`).
    """

    size: str
    trunk: NASVariant
    width_mult: float
    bbox_inter: tuple[int, int, int] = (128, 256, 512)
    pose_inter: tuple[int, int, int] = (128, 512, 512)
    pose_blocks: tuple[int, int, int] = (2, 2, 3)
    bn_momentum: float
    paper_params_m: float
    paper_counts: str


_TRUNK_N = NASVariant(  # the nano trunk exists only for pose; head_* / paper_* are the detector's fields, unused
    size="n", stem=32,
    stages=((64, 2, 32, False), (128, 3, 48, False), (256, 4, 64, False), (512, 2, 128, False)),
    spp=512, up=((128, 2, 48), (64, 2, 32)), down=((128, 2, 48), (256, 2, 48)),
    head_width_mult=0.33, paper_params_m=0.0, paper_counts="fused")

VARIANTS: dict[str, NASPoseVariant] = {
    "n": NASPoseVariant(size="n", trunk=_TRUNK_N, width_mult=0.33, bn_momentum=0.03, paper_params_m=9.9,
                        paper_counts="reference"),
    "s": NASPoseVariant(size="s", trunk=NAS_VARIANTS["s"], width_mult=0.5, bn_momentum=0.1, paper_params_m=22.2,
                        paper_counts="reference"),
    "m": NASPoseVariant(size="m", trunk=NAS_VARIANTS["m"], width_mult=0.75, bn_momentum=0.1, paper_params_m=58.2,
                        paper_counts="reference"),
    "l": NASPoseVariant(size="l", trunk=NAS_VARIANTS["l"], width_mult=1.0, bn_momentum=0.1, paper_params_m=79.4,
                        paper_counts="reference"),
}


class NASPoseHead(nn.Module):
    """One level (super-gradients ``YoloNASPoseDFLHead`` with ``shared_stem: False``,
    ``pose_conf_in_class_head: True``): a 1x1 ConvBNReLU stem per branch (``bbox_stem``,
    ``pose_stem``); class branch (3x3 ConvBNReLU, 1x1 conv to ``nc + nkpt``: the class logits and
    each keypoint's visibility logit), box branch (3x3 ConvBNReLU, 1x1 conv to ``4 * reg_max``),
    pose branch (``blocks`` 3x3 ConvBNReLU, 1x1 conv to ``2 * nkpt``: x, y per keypoint).

    x (Tensor[B, c, h, w]) -> Tensor[B, 4 * reg_max + nc + 3 * nkpt, h, w] (module docstring).
    """

    def __init__(self, c: int, box_c: int, pose_c: int, *, blocks: int, nc: int, nkpt: int,
                 reg_max: int = REG_MAX) -> None:
        super().__init__()
        self.nc, self.nkpt = nc, nkpt
        self.bbox_stem = ConvBNAct(c, box_c, 1, act=relu())
        self.pose_stem = ConvBNAct(c, pose_c, 1, act=relu())
        self.cls_convs = nn.Sequential(ConvBNAct(box_c, box_c, 3, act=relu()))
        self.reg_convs = nn.Sequential(ConvBNAct(box_c, box_c, 3, act=relu()))
        self.pose_convs = nn.Sequential(*(ConvBNAct(pose_c, pose_c, 3, act=relu()) for _ in range(blocks)))
        self.reg_pred = nn.Conv2d(box_c, 4 * reg_max, 1)
        self.cls_pred = nn.Conv2d(box_c, nc + nkpt, 1)
        self.pose_pred = nn.Conv2d(pose_c, 2 * nkpt, 1)
        with torch.no_grad():
            self.cls_pred.bias.fill_(-math.log((1 - PRIOR_PROB) / PRIOR_PROB))

    def forward(self, x: Tensor) -> Tensor:
        box = self.bbox_stem(x)
        cls, vis = self.cls_pred(self.cls_convs(box)).split((self.nc, self.nkpt), 1)
        xy = self.pose_pred(self.pose_convs(self.pose_stem(x))).unflatten(1, (self.nkpt, 2))  # (B, K, 2, h, w)
        kpt = torch.cat((xy, vis.unsqueeze(2)), 2).flatten(1, 2)  # (B, 3K, h, w): x, y, v per keypoint
        return torch.cat((self.reg_pred(self.reg_convs(box)), cls, kpt), 1)


class NASPoseHeads(nn.Module):
    """The three per-level heads (``head1`` .. ``head3``, strides 8, 16, 32).

    feats ([Tensor[B, ch_i, h_i, w_i]]) -> [Tensor[B, 4 * reg_max + nc + 3 * nkpt, h_i, w_i]].
    """

    def __init__(self, ch: tuple[int, ...], v: NASPoseVariant, *, nc: int, nkpt: int) -> None:
        super().__init__()
        levels = zip(ch, v.bbox_inter, v.pose_inter, v.pose_blocks, strict=True)
        for i, (c, bi, pi, n) in enumerate(levels, 1):
            setattr(self, f"head{i}", NASPoseHead(c, head_width(bi, v.width_mult), head_width(pi, v.width_mult),
                                                  blocks=n, nc=nc, nkpt=nkpt))
        self.n_levels = len(ch)

    def forward(self, feats: list[Tensor]) -> list[Tensor]:
        return [getattr(self, f"head{i + 1}")(f) for i, f in enumerate(feats)]


class YOLONASPoseNet(nn.Module):
    """Trunk (``backbone``, ``neck``) + ``heads``.

    Attributes: ``nc``, ``nkpt``, ``reg_max`` (17 bins), ``strides`` ((8, 16, 32)), ``kpt_scale``
    (1.0: the keypoint decode of the module docstring), ``size``, ``skeleton`` (set by the family).
    forward: x (Tensor[B, 3, H, W]) -> [Tensor[B, 68 + nc + 3 * nkpt, H / s, W / s] for s in strides].
    """

    kpt_scale: float = 1.0

    def __init__(self, v: NASPoseVariant, *, nc: int, nkpt: int) -> None:
        super().__init__()
        self.size = v.size
        self.nc, self.nkpt = nc, nkpt
        self.reg_max = REG_MAX
        self.strides = STRIDES
        self.skeleton: list[list[int]] | None = None
        trunk = NASTrunk(v.trunk)
        self.backbone = trunk.backbone
        self.neck = trunk.neck
        self.heads = NASPoseHeads(trunk.out_channels, v, nc=nc, nkpt=nkpt)
        for m in self.modules():  # the pose arch files' BatchNorm settings
            if isinstance(m, nn.BatchNorm2d):
                m.eps, m.momentum = BN_EPS, v.bn_momentum

    def forward(self, x: Tensor) -> list[Tensor]:
        return self.heads(self.neck(self.backbone(x)))

    def fuse(self) -> YOLONASPoseNet:
        """Merge every QARepVGG block into one 3x3 conv and fold every BatchNorm, in place."""
        fuse_nas(self)
        return self


def reference_param_count(net: nn.Module) -> int:
    """Parameters as super-gradients counts its trainable module: ours (unfused) plus, per
    QARepVGG block, the merged 3x3 conv with bias it keeps unused beside the branches (the
    published YOLO-NAS-Pose counts are these: n 9.90M, s 22.23M, m 58.21M, l 79.37M)."""
    n = sum(p.numel() for p in net.parameters())
    return n + sum(m.c2 * m.c1 * 9 + m.c2 for m in net.modules() if isinstance(m, QARepVGGBlock) and m.conv is None)


def check_nkpt(nkpt: object) -> int:
    """``nkpt`` as an int >= 1, else a one-line :class:`ConfigError`."""
    if isinstance(nkpt, bool) or not isinstance(nkpt, int) or nkpt < 1:
        raise ConfigError(f"nkpt (keypoints per object) must be an int >= 1, got {nkpt!r}")
    return nkpt


def build_yolonas_pose(*, size: str, nc: int = 1, nkpt: int = NKPT) -> YOLONASPoseNet:
    """Build an untrained YOLO-NAS-Pose network (``nc`` 1 and 17 keypoints: the reference's COCO
    person model).

    Example:
        >>> net = build_yolonas_pose(size="n", nc=2, nkpt=5).eval()
        >>> [tuple(o.shape[1:]) for o in net(torch.zeros(1, 3, 64, 64))]
        [(85, 8, 8), (85, 4, 4), (85, 2, 2)]
    """
    if size not in VARIANTS:
        raise ConfigError(f"yolonas_pose has no size {size!r}; sizes: {', '.join(VARIANTS)}")
    if isinstance(nc, bool) or not isinstance(nc, int) or nc < 1:
        raise ConfigError(f"nc must be a positive int, got {nc!r}")
    return YOLONASPoseNet(VARIANTS[size], nc=nc, nkpt=check_nkpt(nkpt))
