"""YOLOv7 detection network (sizes tiny, b, x): E-ELAN backbone, SPPCSPC + PAN neck, RepConv (b)
or 3x3 conv (tiny, x) in front of an anchor-based head (deploy form: implicit layers folded).

Contract (the rest of the library depends on it): input Tensor[B, 3, H, W] float in [0, 1],
H and W multiples of 32; output, in train and eval mode alike, a list of three tensors for
strides 8, 16, 32, each Tensor[B, na * (5 + nc), H / s, W / s] of raw logits with channels
laid out ``(anchor, field)``: per anchor ``x, y, w, h, obj, cls_0..cls_{nc-1}``. Decoding
(sigmoid, grid, anchor scaling) is postprocessing (:mod:`libreyolo.models.yolo7.postprocess`),
so the forward is static and CUDA-graph capturable.
"""

from __future__ import annotations

import math

import torch
from torch import Tensor, nn

from ...errors import ConfigError
from ...layers.conv import RepConvN, fuse_modules
from .elan7 import ELAN7, SPPCSPC, Act, MPConv, SPPCSPTiny, conv7
from .variants import VARIANTS, ELAN7Args, YOLO7Variant

STRIDES = (8, 16, 32)
NUM_ANCHORS = 3


def _elan(c_in: int, args: ELAN7Args, act: Act) -> ELAN7:
    c_branch, c_mid, n, tap, c_out = args
    return ELAN7(c_in, c_out, c_branch=c_branch, c_mid=c_mid, n=n, tap=tap, act=act)


class Detect7(nn.Module):
    """Anchor-based head: one 1x1 conv (with bias) per level to ``na * (5 + nc)`` channels.

    ``anchors`` (buffer Tensor[nl, na, 2], float32, pixels) travels with the state dict, so a
    checkpoint trained with other anchors restores them.

    feats ([Tensor[B, ch_i, h_i, w_i]]) -> [Tensor[B, na * (5 + nc), h_i, w_i]].
    """

    def __init__(self, *, nc: int, ch: tuple[int, ...], anchors: tuple[tuple[int, ...], ...],
                 strides: tuple[int, ...] = STRIDES) -> None:
        super().__init__()
        self.nc = nc
        self.no = 5 + nc
        self.na = len(anchors[0]) // 2
        self.strides = tuple(strides)
        a = torch.tensor(anchors, dtype=torch.float32).view(len(anchors), self.na, 2)
        self.register_buffer("anchors", a)
        self.m = nn.ModuleList(nn.Conv2d(c, self.na * self.no, 1) for c in ch)

    @torch.no_grad()
    def init_bias(self, *, imgsz: int = 640) -> None:
        """Objectness starts at the prior of ~8 objects per ``imgsz`` image,
        ``log(8 / (imgsz / s) ** 2)``; class logits at ``log(0.6 / (nc - 0.99))`` (the
        reference's priors); box logits keep their default initialisation."""
        for conv, s in zip(self.m, self.strides, strict=True):
            b = conv.bias.view(self.na, self.no)
            b[:, 4].fill_(math.log(8 / (imgsz / s) ** 2))
            b[:, 5:].fill_(math.log(0.6 / (self.nc - 0.99)))

    def forward(self, feats: list[Tensor]) -> list[Tensor]:
        return [m(x) for m, x in zip(self.m, feats, strict=True)]


class YOLO7Net(nn.Module):
    """YOLOv7 detector of one size (see :mod:`libreyolo.models.yolo7.variants`).

    Attributes: ``nc``, ``na`` (3), ``strides`` ((8, 16, 32)), ``size``, ``head.anchors``.

    x (Tensor[B, 3, H, W], float in [0, 1], H and W multiples of 32) ->
    [Tensor[B, na * (5 + nc), H / s, W / s] for s in (8, 16, 32)], raw logits.
    """

    def __init__(self, variant: YOLO7Variant, *, nc: int) -> None:
        super().__init__()
        v = variant
        act = v.act
        self.size = v.size
        self.nc = nc
        self.na = NUM_ANCHORS
        self.strides = STRIDES
        # backbone ----------------------------------------------------------------------
        stem, c = [], 3
        for c_out, k, s in v.stem:
            stem.append(conv7(c, c_out, k, s, act=act))
            c = c_out
        self.stem = nn.Sequential(*stem)  # stride 4
        self.stage2 = _elan(c, v.backbone[0], act)
        c = v.backbone[0][4]
        downs, stages, widths = [], [], []
        for i in range(3):  # P3, P4, P5
            if v.down == "mp":
                downs.append(MPConv(c, v.down_c[i], act=act))
                c = 2 * v.down_c[i]
            else:
                downs.append(nn.MaxPool2d(2, 2))
            stages.append(_elan(c, v.backbone[i + 1], act))
            c = v.backbone[i + 1][4]
            widths.append(c)
        self.down3, self.down4, self.down5 = downs
        self.stage3, self.stage4, self.stage5 = stages
        c3, c4, c5 = widths
        # neck --------------------------------------------------------------------------
        spp_kind, cs = v.spp
        self.spp: nn.Module = (SPPCSPC(c5, cs, act=act) if spp_kind == "sppcspc"
                               else SPPCSPTiny(c5, cs, act=act))
        self.up = nn.Upsample(scale_factor=2.0, mode="nearest")
        l4, l3 = v.lateral
        self.lat4, self.route4 = conv7(cs, l4, 1, act=act), conv7(c4, l4, 1, act=act)
        self.top4 = _elan(2 * l4, v.top[0], act)
        t4 = v.top[0][4]
        self.lat3, self.route3 = conv7(t4, l3, 1, act=act), conv7(c3, l3, 1, act=act)
        self.top3 = _elan(2 * l3, v.top[1], act)
        n3 = v.top[1][4]
        kind, d4, d5 = v.neck_down
        if kind == "mp":
            self.bottom4_down: nn.Module = MPConv(n3, d4, act=act)
            d4_out = 2 * d4
        else:
            self.bottom4_down = conv7(n3, d4, 3, 2, act=act)
            d4_out = d4
        self.bottom4 = _elan(d4_out + t4, v.bottom[0], act)
        n4 = v.bottom[0][4]
        if kind == "mp":
            self.bottom5_down: nn.Module = MPConv(n4, d5, act=act)
            d5_out = 2 * d5
        else:
            self.bottom5_down = conv7(n4, d5, 3, 2, act=act)
            d5_out = d5
        self.bottom5 = _elan(d5_out + cs, v.bottom[1], act)
        n5 = v.bottom[1][4]
        # head --------------------------------------------------------------------------
        hkind, hc = v.head_conv
        ins = (n3, n4, n5)
        if hkind == "repconv":
            self.head_convs = nn.ModuleList(RepConvN(ci, co) for ci, co in zip(ins, hc, strict=True))
        else:
            self.head_convs = nn.ModuleList(conv7(ci, co, 3, act=act) for ci, co in zip(ins, hc, strict=True))
        self.head = Detect7(nc=nc, ch=hc, anchors=v.anchors, strides=self.strides)
        self.head.init_bias()

    def forward(self, x: Tensor) -> list[Tensor]:
        x = self.stage2(self.stem(x))
        p3 = self.stage3(self.down3(x))  # stride 8
        p4 = self.stage4(self.down4(p3))  # stride 16
        p5 = self.spp(self.stage5(self.down5(p4)))  # stride 32
        t4 = self.top4(torch.cat((self.route4(p4), self.up(self.lat4(p5))), 1))
        n3 = self.top3(torch.cat((self.route3(p3), self.up(self.lat3(t4))), 1))
        n4 = self.bottom4(torch.cat((self.bottom4_down(n3), t4), 1))
        n5 = self.bottom5(torch.cat((self.bottom5_down(n4), p5), 1))
        feats = [conv(f) for conv, f in zip(self.head_convs, (n3, n4, n5), strict=True)]
        return self.head(feats)

    def fuse(self) -> YOLO7Net:
        """Fold BatchNorms into convs and merge RepConv branches, in place, for inference.

        Outputs equal the unfused eval-mode outputs within float tolerance. Parameters are
        replaced (optimizers / captured graphs holding the old ones must be rebuilt) and the
        fused network can no longer train its BatchNorms.
        """
        fuse_modules(self)
        return self


def build_yolo7(*, size: str, nc: int) -> YOLO7Net:
    """Build an untrained YOLOv7 detector.

    Example:
        >>> net = build_yolo7(size="tiny", nc=80)
        >>> [o.shape[1:] for o in net(torch.zeros(1, 3, 64, 64))]
        [torch.Size([255, 8, 8]), torch.Size([255, 4, 4]), torch.Size([255, 2, 2])]
    """
    if size not in VARIANTS:
        raise ConfigError(f"yolo7 has no size {size!r}; sizes: {', '.join(VARIANTS)}")
    if isinstance(nc, bool) or not isinstance(nc, int) or nc < 1:
        raise ConfigError(f"nc must be a positive int, got {nc!r}")
    return YOLO7Net(VARIANTS[size], nc=nc)

