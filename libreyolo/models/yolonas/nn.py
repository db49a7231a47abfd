"""YOLO-NAS detection network (sizes s, m, l): the lineage trunk (:mod:`libreyolo.models._yolonas.net`)
and the NDFL heads, one :class:`NASDFLHead` per level.

Contract (the rest of the library depends on it): input Tensor[B, 3, H, W] float in [0, 1],
H and W multiples of 32; output, in train and eval mode alike, a list of three tensors for
strides 8, 16, 32, each Tensor[B, 4 * REG_MAX + nc, H / s, W / s] of raw logits (box
distribution logits first, side-major ``(l, t, r, b) x REG_MAX`` bins, then class logits).
``REG_MAX`` is the number of distribution bins, 17: the reference's ``reg_max: 16`` names the
largest bin (distances 0..16 in grid units). Decoding is postprocessing, so the forward is static.
"""

from __future__ import annotations

import math

import torch
from torch import Tensor, nn

from ...errors import ConfigError
from ...layers.conv import ConvBNAct
from .._yolonas.blocks import relu
from .._yolonas.net import STRIDES, NASTrunk, fuse_nas
from .._yolonas.variants import VARIANTS, NASVariant, head_width

__all__ = ["REG_MAX", "STRIDES", "NASDFLHead", "NDFLHeads", "YOLONASNet", "build_yolonas", "head_width"]

REG_MAX = 17  # distribution bins per side (the reference's reg_max 16 + 1)
PRIOR_PROB = 0.01  # initial class probability (the reference's prior_prob)


class NASDFLHead(nn.Module):
    """One level: 1x1 ConvBNReLU stem, then a class branch (3x3 ConvBNReLU, 1x1 conv to ``nc``)
    and a box branch (3x3 ConvBNReLU, 1x1 conv to ``4 * reg_max``).

    x (Tensor[B, c, h, w]) -> Tensor[B, 4 * reg_max + nc, h, w] (box logits first).
    """

    def __init__(self, c: int, inter: int, *, nc: int, reg_max: int = REG_MAX) -> None:
        super().__init__()
        self.stem = ConvBNAct(c, inter, 1, act=relu())
        self.cls_convs = nn.Sequential(ConvBNAct(inter, inter, 3, act=relu()))
        self.reg_convs = nn.Sequential(ConvBNAct(inter, inter, 3, act=relu()))
        self.cls_pred = nn.Conv2d(inter, nc, 1)
        self.reg_pred = nn.Conv2d(inter, 4 * reg_max, 1)
        with torch.no_grad():
            self.cls_pred.bias.fill_(-math.log((1 - PRIOR_PROB) / PRIOR_PROB))

    def forward(self, x: Tensor) -> Tensor:
        x = self.stem(x)
        return torch.cat((self.reg_pred(self.reg_convs(x)), self.cls_pred(self.cls_convs(x))), 1)


class NDFLHeads(nn.Module):
    """The three per-level heads (``head1`` .. ``head3``, strides 8, 16, 32), widths
    ``head_width(variant.head_inter[i], variant.head_width_mult)``.

    feats ([Tensor[B, ch_i, h_i, w_i]]) -> [Tensor[B, 4 * reg_max + nc, h_i, w_i]].
    """

    def __init__(self, ch: tuple[int, ...], v: NASVariant, *, nc: int, reg_max: int = REG_MAX) -> None:
        super().__init__()
        if len(ch) != len(v.head_inter):
            raise ConfigError(f"NDFLHeads got {len(ch)} input widths for {len(v.head_inter)} levels")
        self.nc, self.reg_max = nc, reg_max
        for i, (c, inter) in enumerate(zip(ch, v.head_inter, strict=True), 1):
            setattr(self, f"head{i}", NASDFLHead(c, head_width(inter, v.head_width_mult), nc=nc, reg_max=reg_max))
        self.n_levels = len(ch)

    def forward(self, feats: list[Tensor]) -> list[Tensor]:
        return [getattr(self, f"head{i + 1}")(f) for i, f in enumerate(feats)]


class YOLONASNet(nn.Module):
    """Trunk (``backbone``, ``neck``) + ``heads``.

    Attributes: ``nc``, ``reg_max`` (17 bins), ``strides`` ((8, 16, 32)), ``size``.
    forward: x (Tensor[B, 3, H, W]) -> [Tensor[B, 4 * 17 + nc, H / s, W / s] for s in strides].
    """

    def __init__(self, v: NASVariant, *, nc: int) -> None:
        super().__init__()
        self.size = v.size
        self.nc = nc
        self.reg_max = REG_MAX
        self.strides = STRIDES
        trunk = NASTrunk(v)
        self.backbone = trunk.backbone
        self.neck = trunk.neck
        self.heads = NDFLHeads(trunk.out_channels, v, nc=nc)

    def forward(self, x: Tensor) -> list[Tensor]:
        return self.heads(self.neck(self.backbone(x)))

    def fuse(self) -> YOLONASNet:
        """Merge every QARepVGG block into one 3x3 conv and fold every BatchNorm, in place."""
        fuse_nas(self)
        return self


def build_yolonas(*, size: str, nc: int) -> YOLONASNet:
    """Build an untrained YOLO-NAS detector.

    Example:
        >>> net = build_yolonas(size="s", nc=80).eval()
        >>> [o.shape[1:] for o in net(torch.zeros(1, 3, 64, 64))]
        [torch.Size([148, 8, 8]), torch.Size([148, 4, 4]), torch.Size([148, 2, 2])]
    """
    if size not in VARIANTS:
        raise ConfigError(f"yolonas has no size {size!r}; sizes: {', '.join(VARIANTS)}")
    if isinstance(nc, bool) or not isinstance(nc, int) or nc < 1:
        raise ConfigError(f"nc must be a positive int, got {nc!r}")
    return YOLONASNet(VARIANTS[size], nc=nc)
