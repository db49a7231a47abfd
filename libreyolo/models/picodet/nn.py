"""PicoDet detection network (sizes s, m, l): ESNet backbone, CSP-PAN neck with a fourth,
stride-64 level, and a head of per-level depthwise-separable convs.

Contract (the rest of the library depends on it): input Tensor[B, 3, H, W] float RGB in [0, 1],
H and W multiples of 32; output, in train and eval mode alike, a list of four tensors for
strides 8, 16, 32, 64, each Tensor[B, nc + 4 * (REG_MAX + 1), ceil(H / s), ceil(W / s)]: class
logits first, then per side (left, top, right, bottom) the logits of the distance
distribution over the bins 0..REG_MAX (in stride units), the reference's channel order.
Decoding is postprocessing (:mod:`libreyolo.models.picodet.postprocess`), so the forward is
static and CUDA-graph capturable.

The reference normalises RGB pixels with ImageNet mean/std in its data pipeline; here that is
the first op of the network, on constant buffers.
"""

from __future__ import annotations

import math

import torch
from torch import Tensor, nn

from ...errors import ConfigError
from ...layers.conv import ConvBNAct, fuse_modules
from ...layers.csp import CSPLayer
from ...layers.dwconv import DWConvBNAct
from .esnet import ESNet, hswish
from .variants import REG_MAX, VARIANTS, PicoDetVariant

STRIDES = (8, 16, 32, 64)
PIXEL_MEAN = (0.485, 0.456, 0.406)
PIXEL_STD = (0.229, 0.224, 0.225)
NECK_KERNEL = 5
# the reference's BatchNorm (Paddle defaults): eps 1e-5, running-average momentum 0.1 (Paddle 0.9)
BN_EPS, BN_MOMENTUM = 1e-5, 0.1


class CSPPAN(nn.Module):
    """Path aggregation with CSP layers of 5x5 depthwise-separable bottlenecks, every level
    ``c`` channels wide, plus a stride-64 level.

    (C3, C4, C5) with channels ``ch`` -> [P3, P4, P5, P6], each Tensor[B, c, h_i, w_i]: 1x1
    reductions to ``c``; top-down (nearest 2x upsample, concat, CSP layer); bottom-up (5x5
    depthwise-separable stride-2 conv, concat, CSP layer); P6 = dw-sep stride-2 conv of the
    reduced C5 + dw-sep stride-2 conv of P5.
    """

    def __init__(self, *, ch: tuple[int, int, int], c: int, n: int = 1) -> None:
        super().__init__()
        k = NECK_KERNEL
        self.reduce = nn.ModuleList(ConvBNAct(ci, c, 1, act=hswish()) for ci in ch)
        self.up = nn.Upsample(scale_factor=2.0, mode="nearest")

        def csp() -> CSPLayer:
            return CSPLayer(2 * c, c, n=n, shortcut=False, depthwise=True, k=k, act=hswish())

        self.top_down = nn.ModuleList(csp() for _ in range(2))  # to P4, then P3
        self.downsample = nn.ModuleList(DWConvBNAct(c, c, k, 2, act=hswish()) for _ in range(2))
        self.bottom_up = nn.ModuleList(csp() for _ in range(2))  # to P4, then P5
        self.top_from_c5 = DWConvBNAct(c, c, k, 2, act=hswish())
        self.top_from_p5 = DWConvBNAct(c, c, k, 2, act=hswish())

    def forward(self, feats: tuple[Tensor, Tensor, Tensor]) -> list[Tensor]:
        r3, r4, r5 = (m(x) for m, x in zip(self.reduce, feats, strict=True))
        t4 = self.top_down[0](torch.cat((self.up(r5), r4), 1))
        p3 = self.top_down[1](torch.cat((self.up(t4), r3), 1))
        p4 = self.bottom_up[0](torch.cat((self.downsample[0](p3), t4), 1))
        p5 = self.bottom_up[1](torch.cat((self.downsample[1](p4), r5), 1))
        p6 = self.top_from_c5(r5) + self.top_from_p5(p5)
        return [p3, p4, p5, p6]


class PicoHead(nn.Module):
    """Per level (no weights shared between levels): ``n_convs`` 5x5 depthwise-separable conv
    pairs (each half BatchNorm + hard-swish), one branch for classes and boxes alike, then a
    1x1 conv to ``nc + 4 * (REG_MAX + 1)`` logits.

    feats ([Tensor[B, c, h_i, w_i]]) -> [Tensor[B, nc + 4 * (REG_MAX + 1), h_i, w_i]].
    """

    def __init__(self, *, nc: int, c: int, n_convs: int, n_levels: int = len(STRIDES)) -> None:
        super().__init__()
        self.nc = nc
        self.convs = nn.ModuleList(
            nn.Sequential(*(DWConvBNAct(c, c, 5, 1, act=hswish()) for _ in range(n_convs))) for _ in range(n_levels))
        self.pred = nn.ModuleList(nn.Conv2d(c, nc + 4 * (REG_MAX + 1), 1) for _ in range(n_levels))

    @torch.no_grad()
    def init_weights(self, *, prior_prob: float = 0.01) -> None:
        """Reference initialisation: head convs N(0, 0.01); the prediction conv's bias at the
        ``prior_prob`` prior for every output (the distance logits too: a constant shift of a
        softmax changes nothing)."""
        for m in self.modules():
            if isinstance(m, nn.Conv2d):
                nn.init.normal_(m.weight, 0.0, 0.01)
                if m.bias is not None:
                    nn.init.zeros_(m.bias)
        for conv in self.pred:
            nn.init.constant_(conv.bias, -math.log((1 - prior_prob) / prior_prob))

    def forward(self, feats: list[Tensor]) -> list[Tensor]:
        return [pred(convs(x)) for convs, pred, x in zip(self.convs, self.pred, feats, strict=True)]


class PicoDetNet(nn.Module):
    """PicoDet detector of one size (see :mod:`libreyolo.models.picodet.variants`).

    Attributes: ``nc``, ``strides`` ((8, 16, 32, 64)), ``reg_max`` (bins per side, 8), ``size``.

    x (Tensor[B, 3, H, W], float RGB in [0, 1], H and W multiples of 32) ->
    [Tensor[B, nc + 32, ceil(H / s), ceil(W / s)] for s in (8, 16, 32, 64)], class logits then
    distance-distribution logits.
    """

    def __init__(self, variant: PicoDetVariant, *, nc: int) -> None:
        super().__init__()
        v = variant
        self.size = v.size
        self.nc = nc
        self.strides = STRIDES
        self.reg_max = REG_MAX + 1  # bins per side, the unit of libreyolo.ops.anchors
        self.register_buffer("pixel_mean", torch.tensor(PIXEL_MEAN).view(1, 3, 1, 1), persistent=False)
        self.register_buffer("pixel_std", torch.tensor(PIXEL_STD).view(1, 3, 1, 1), persistent=False)
        self.backbone = ESNet(v)
        self.neck = CSPPAN(ch=self.backbone.out_channels, c=v.width)
        self.head = PicoHead(nc=nc, c=v.width, n_convs=v.head_convs)
        self.head.init_weights()
        for m in self.modules():
            if isinstance(m, nn.BatchNorm2d):
                m.eps, m.momentum = BN_EPS, BN_MOMENTUM

    def forward(self, x: Tensor) -> list[Tensor]:
        x = (x - self.pixel_mean.to(x.dtype)) / self.pixel_std.to(x.dtype)
        return self.head(self.neck(self.backbone(x)))

    def fuse(self) -> PicoDetNet:
        """Fold every BatchNorm into its conv, in place, for inference (outputs equal the
        unfused eval-mode outputs within float tolerance; the fused network cannot train)."""
        fuse_modules(self)
        return self


def build_picodet(*, size: str, nc: int) -> PicoDetNet:
    """Build an untrained PicoDet detector.

    Example:
        >>> net = build_picodet(size="s", nc=80).eval()
        >>> [tuple(o.shape[1:]) for o in net(torch.zeros(1, 3, 64, 64))]
        [(112, 8, 8), (112, 4, 4), (112, 2, 2), (112, 1, 1)]
    """
    if size not in VARIANTS:
        raise ConfigError(f"picodet has no size {size!r}; sizes: {', '.join(VARIANTS)}")
    if isinstance(nc, bool) or not isinstance(nc, int) or nc < 1:
        raise ConfigError(f"nc must be a positive int, got {nc!r}")
    return PicoDetNet(VARIANTS[size], nc=nc)
