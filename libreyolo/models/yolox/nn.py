"""YOLOX detection network (sizes nano, tiny, s, m, l, x): CSPDarknet backbone with a Focus
stem and an SPP bottleneck, PAFPN neck, and the decoupled anchor-free head.

Contract (the rest of the library depends on it): input Tensor[B, 3, H, W] float in [0, 1],
H and W multiples of 32; output, in train and eval mode alike, a list of three tensors for
strides 8, 16, 32, each Tensor[B, 4 + 1 + nc, H / s, W / s] of raw head outputs in channel
order (reg: tx, ty, tw, th; obj logit; class logits). Decoding (grid offsets, ``exp`` sizes,
sigmoids) lives in :mod:`.postprocess` and :mod:`.loss`, so the forward is static and
CUDA-graph capturable.

Module names equal those of the reference implementation (``backbone.backbone.dark3…``,
``backbone.C3_p4``, ``head.cls_convs.0.1.conv``…), so a reference state dict loads unchanged.

Input scale: libreyolo feeds [0, 1] RGB. The reference trains on [0, 255] BGR; a converted
reference checkpoint therefore needs its first conv rescaled (x255) and its input channels
permuted (see README.md).
"""

from __future__ import annotations

import math

import torch
from torch import Tensor, nn

from ...errors import ConfigError
from ...layers.conv import ConvBNAct, fuse_modules
from ...layers.dwconv import conv_or_dw
from ...layers.spp import SPPBottleneck
from .csp import CSPLayer
from .focus import Focus
from .variants import VARIANTS, YOLOXVariant

STRIDES = (8, 16, 32)
PRIOR_PROB = 0.01  # initial sigmoid of the objectness and class logits


class CSPDarknet(nn.Module):
    """Focus stem (stride 2) and four stages ``dark2..dark5`` (stride 4, 8, 16, 32), each a
    stride-2 3x3 conv and a CSPLayer; ``dark5`` has an SPP bottleneck before its CSPLayer (which
    has no shortcuts).

    x (Tensor[B, 3, H, W]) -> (dark3 Tensor[B, 4c, H/8, W/8], dark4 Tensor[B, 8c, H/16, W/16],
    dark5 Tensor[B, 16c, H/32, W/32]) with c = ``int(64 * width)``.
    """

    def __init__(self, v: YOLOXVariant) -> None:
        super().__init__()
        c, d, dw = v.base_channels, v.base_depth, v.depthwise
        self.stem = Focus(3, c, k=3)
        self.dark2 = nn.Sequential(conv_or_dw(c, 2 * c, 3, 2, depthwise=dw),
                                   CSPLayer(2 * c, 2 * c, n=d, depthwise=dw))
        self.dark3 = nn.Sequential(conv_or_dw(2 * c, 4 * c, 3, 2, depthwise=dw),
                                   CSPLayer(4 * c, 4 * c, n=3 * d, depthwise=dw))
        self.dark4 = nn.Sequential(conv_or_dw(4 * c, 8 * c, 3, 2, depthwise=dw),
                                   CSPLayer(8 * c, 8 * c, n=3 * d, depthwise=dw))
        self.dark5 = nn.Sequential(conv_or_dw(8 * c, 16 * c, 3, 2, depthwise=dw),
                                   SPPBottleneck(16 * c, 16 * c),
                                   CSPLayer(16 * c, 16 * c, n=d, shortcut=False, depthwise=dw))

    def forward(self, x: Tensor) -> tuple[Tensor, Tensor, Tensor]:
        x = self.dark2(self.stem(x))
        c3 = self.dark3(x)
        c4 = self.dark4(c3)
        c5 = self.dark5(c4)
        return c3, c4, c5


class PAFPN(nn.Module):
    """CSPDarknet plus the path-aggregation neck (top-down, then bottom-up, CSPLayers without
    shortcuts). Attribute names are the reference's (``C3_p4`` etc.) for checkpoint conversion.

    x (Tensor[B, 3, H, W]) -> (Tensor[B, c0, H/8, W/8], Tensor[B, c1, H/16, W/16],
    Tensor[B, c2, H/32, W/32]) with (c0, c1, c2) = ``variant.neck_channels``.
    """

    def __init__(self, v: YOLOXVariant) -> None:
        super().__init__()
        c0, c1, c2 = v.neck_channels
        n, dw = v.neck_depth, v.depthwise
        self.backbone = CSPDarknet(v)
        self.upsample = nn.Upsample(scale_factor=2, mode="nearest")
        self.lateral_conv0 = ConvBNAct(c2, c1, 1)
        self.C3_p4 = CSPLayer(2 * c1, c1, n=n, shortcut=False, depthwise=dw)  # noqa: N815
        self.reduce_conv1 = ConvBNAct(c1, c0, 1)
        self.C3_p3 = CSPLayer(2 * c0, c0, n=n, shortcut=False, depthwise=dw)  # noqa: N815
        self.bu_conv2 = conv_or_dw(c0, c0, 3, 2, depthwise=dw)
        self.C3_n3 = CSPLayer(2 * c0, c1, n=n, shortcut=False, depthwise=dw)  # noqa: N815
        self.bu_conv1 = conv_or_dw(c1, c1, 3, 2, depthwise=dw)
        self.C3_n4 = CSPLayer(2 * c1, c2, n=n, shortcut=False, depthwise=dw)  # noqa: N815

    def forward(self, x: Tensor) -> tuple[Tensor, Tensor, Tensor]:
        x3, x4, x5 = self.backbone(x)
        lat5 = self.lateral_conv0(x5)  # (B, c1, H/32, W/32)
        td4 = self.C3_p4(torch.cat((self.upsample(lat5), x4), 1))  # (B, c1, H/16, W/16)
        lat4 = self.reduce_conv1(td4)  # (B, c0, H/16, W/16)
        out3 = self.C3_p3(torch.cat((self.upsample(lat4), x3), 1))  # (B, c0, H/8, W/8)
        out4 = self.C3_n3(torch.cat((self.bu_conv2(out3), lat4), 1))  # (B, c1, H/16, W/16)
        out5 = self.C3_n4(torch.cat((self.bu_conv1(out4), lat5), 1))  # (B, c2, H/32, W/32)
        return out3, out4, out5


class YOLOXHead(nn.Module):
    """Decoupled head, one set of branches per level (weights not shared across levels).

    Per level: 1x1 stem to ``w = int(256 * width)``; class branch two 3x3 convs (depthwise-
    separable for nano) then a 1x1 conv to ``nc``; regression branch two 3x3 convs then two
    1x1 convs, to 4 box outputs and to 1 objectness logit.

    feats ([Tensor[B, ch_i, h_i, w_i]]) -> [Tensor[B, 4 + 1 + nc, h_i, w_i]] (reg, obj, cls).
    """

    def __init__(self, *, nc: int, ch: tuple[int, ...], width: int, depthwise: bool) -> None:
        super().__init__()
        self.nc = nc
        self.stems = nn.ModuleList(ConvBNAct(c, width, 1) for c in ch)
        self.cls_convs = nn.ModuleList(self._branch(width, depthwise) for _ in ch)
        self.reg_convs = nn.ModuleList(self._branch(width, depthwise) for _ in ch)
        self.cls_preds = nn.ModuleList(nn.Conv2d(width, nc, 1) for _ in ch)
        self.reg_preds = nn.ModuleList(nn.Conv2d(width, 4, 1) for _ in ch)
        self.obj_preds = nn.ModuleList(nn.Conv2d(width, 1, 1) for _ in ch)
        self.init_bias()

    @staticmethod
    def _branch(width: int, depthwise: bool) -> nn.Sequential:
        return nn.Sequential(conv_or_dw(width, width, 3, 1, depthwise=depthwise),
                             conv_or_dw(width, width, 3, 1, depthwise=depthwise))

    @torch.no_grad()
    def init_bias(self, prior_prob: float = PRIOR_PROB) -> None:
        """Objectness and class logits start at ``sigmoid^-1(prior_prob)`` (focal-loss prior)."""
        b = -math.log((1 - prior_prob) / prior_prob)
        for conv in (*self.cls_preds, *self.obj_preds):
            conv.bias.fill_(b)

    def forward(self, feats: list[Tensor] | tuple[Tensor, ...]) -> list[Tensor]:
        out = []
        for i, f in enumerate(feats):
            x = self.stems[i](f)
            cls = self.cls_preds[i](self.cls_convs[i](x))  # (B, nc, h, w)
            r = self.reg_convs[i](x)
            out.append(torch.cat((self.reg_preds[i](r), self.obj_preds[i](r), cls), 1))  # (B, 5 + nc, h, w)
        return out


class YOLOXNet(nn.Module):
    """The whole YOLOX detector: ``head(backbone(x))``; see the module docstring for the contract.

    Attributes read by postprocess / loss: ``nc``, ``strides``, ``size``.

    Example:
        >>> net = build_yolox(size="nano", nc=80).eval()
        >>> [tuple(o.shape) for o in net(torch.zeros(1, 3, 64, 64))]
        [(1, 85, 8, 8), (1, 85, 4, 4), (1, 85, 2, 2)]
    """

    def __init__(self, variant: YOLOXVariant, *, nc: int) -> None:
        super().__init__()
        self.size = variant.size
        self.nc = nc
        self.strides = STRIDES
        self.backbone = PAFPN(variant)
        self.head = YOLOXHead(nc=nc, ch=variant.neck_channels, width=variant.head_width,
                              depthwise=variant.depthwise)

    def forward(self, x: Tensor) -> list[Tensor]:
        return self.head(self.backbone(x))

    def fuse(self) -> YOLOXNet:
        """Fold every BatchNorm into its conv, in place (eval outputs kept within float tolerance)."""
        fuse_modules(self)
        return self


def build_yolox(*, size: str, nc: int) -> YOLOXNet:
    """Build an untrained YOLOX network of ``size`` (nano, tiny, s, m, l, x) with ``nc`` classes."""
    if size not in VARIANTS:
        raise ConfigError(f"YOLOX has no size {size!r}; sizes: {', '.join(VARIANTS)}")
    if not isinstance(nc, int) or nc < 1:
        raise ConfigError(f"nc must be a positive int, got {nc!r}")
    return YOLOXNet(VARIANTS[size], nc=nc)
