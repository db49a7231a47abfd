"""RTMDet lineage network (``rtmdet``, and the trunk of ``rtmdet_ins``; sizes t, s, m, l, x): CSPNeXt
backbone, CSPNeXt-PAFPN neck and the shared-convolution, separate-BatchNorm head.

Contract (the rest of the library depends on it): input Tensor[B, 3, H, W] float RGB in [0, 1],
H and W multiples of 32; output, in train and eval mode alike, a list of three tensors for
strides 8, 16, 32, each Tensor[B, 4 + nc, H / s, W / s]: the raw box regression first (distances
left, top, right, bottom from the level's grid point, in stride units; ``exp`` of it for sizes
with ``exp_on_reg``), then class logits. Decoding is postprocessing
(:mod:`libreyolo.models._rtmdet.postprocess`), so the forward is static and CUDA-graph capturable.

The reference normalises BGR pixels with ImageNet mean/std in its data preprocessor; here the
normalisation (same numbers, RGB order) is the first op of the network, on constant buffers.
"""

from __future__ import annotations

import math
from collections.abc import Callable

import torch
from torch import Tensor, nn

from ...errors import ConfigError
from ...layers.conv import BN_EPS, BN_MOMENTUM, ConvBNAct, fuse_conv_bn, fuse_modules, make_act
from ...layers.spp import SPPBottleneck
from .cspnext import CSPNeXtLayer
from .variants import P5_STAGES, VARIANTS, RTMDetVariant

STRIDES = (8, 16, 32)
# ImageNet statistics of the reference data preprocessor, RGB order, for inputs in [0, 1].
PIXEL_MEAN = (123.675 / 255, 116.28 / 255, 103.53 / 255)
PIXEL_STD = (58.395 / 255, 57.12 / 255, 57.375 / 255)


class CSPNeXt(nn.Module):
    """CSPNeXt P5 backbone scaled by ``deepen`` / ``widen``.

    x (Tensor[B, 3, H, W], normalised) -> (C3, C4, C5): Tensor[B, int(256 w), H/8, W/8],
    Tensor[B, int(512 w), H/16, W/16], Tensor[B, int(1024 w), H/32, W/32].
    """

    def __init__(self, *, deepen: float, widen: float) -> None:
        super().__init__()
        c0 = int(P5_STAGES[0][0] * widen)
        c_half = int(P5_STAGES[0][0] * widen // 2)
        self.stem = nn.Sequential(
            ConvBNAct(3, c_half, 3, 2), ConvBNAct(c_half, c_half, 3, 1), ConvBNAct(c_half, c0, 3, 1),
        )
        stages = []
        for c_in, c_out, n, shortcut, spp in P5_STAGES:
            ci, co = int(c_in * widen), int(c_out * widen)
            layers: list[nn.Module] = [ConvBNAct(ci, co, 3, 2)]
            if spp:
                layers.append(SPPBottleneck(co, co, kernel_sizes=(5, 9, 13)))
            layers.append(CSPNeXtLayer(co, co, n=max(round(n * deepen), 1), shortcut=shortcut, e=0.5,
                                       attention=True))
            stages.append(nn.Sequential(*layers))
        self.stage1, self.stage2, self.stage3, self.stage4 = stages
        self.out_channels = tuple(int(s[1] * widen) for s in P5_STAGES[1:])

    def forward(self, x: Tensor) -> tuple[Tensor, Tensor, Tensor]:
        x = self.stage1(self.stem(x))  # stride 4
        c3 = self.stage2(x)  # stride 8
        c4 = self.stage3(c3)  # stride 16
        c5 = self.stage4(c4)  # stride 32
        return c3, c4, c5


class CSPNeXtPAFPN(nn.Module):
    """Top-down then bottom-up path aggregation with CSPNeXt layers (no shortcut, no attention),
    followed by one 3x3 ConvBNAct per level to ``c_out``.

    (C3, C4, C5) with channels ``ch`` -> [P3, P4, P5], each Tensor[B, c_out, h_i, w_i].
    """

    def __init__(self, *, ch: tuple[int, int, int], c_out: int, n: int) -> None:
        super().__init__()
        c3, c4, c5 = ch
        self.up = nn.Upsample(scale_factor=2.0, mode="nearest")
        # top-down: reduce C5 -> c4, fuse with C4; reduce -> c3, fuse with C3
        self.reduce5 = ConvBNAct(c5, c4, 1)
        self.top4 = CSPNeXtLayer(2 * c4, c4, n=n, shortcut=False)
        self.reduce4 = ConvBNAct(c4, c3, 1)
        self.top3 = CSPNeXtLayer(2 * c3, c3, n=n, shortcut=False)
        # bottom-up
        self.down3 = ConvBNAct(c3, c3, 3, 2)
        self.bottom4 = CSPNeXtLayer(2 * c3, c4, n=n, shortcut=False)
        self.down4 = ConvBNAct(c4, c4, 3, 2)
        self.bottom5 = CSPNeXtLayer(2 * c4, c5, n=n, shortcut=False)
        self.out_convs = nn.ModuleList(ConvBNAct(c, c_out, 3) for c in ch)

    def forward(self, feats: tuple[Tensor, Tensor, Tensor]) -> list[Tensor]:
        c3, c4, c5 = feats
        r5 = self.reduce5(c5)
        t4 = self.top4(torch.cat((self.up(r5), c4), 1))
        r4 = self.reduce4(t4)
        n3 = self.top3(torch.cat((self.up(r4), c3), 1))
        n4 = self.bottom4(torch.cat((self.down3(n3), r4), 1))
        n5 = self.bottom5(torch.cat((self.down4(n4), r5), 1))
        return [conv(x) for conv, x in zip(self.out_convs, (n3, n4, n5), strict=True)]


class SharedConvSepBN(nn.Module):
    """A k x k conv (no bias) whose weight is shared by ``n_levels`` pyramid levels, followed by
    a BatchNorm of each level's own and an activation.

    ``forward(x, level)`` with ``level`` a Python int: x (Tensor[B, c1, H, W]) ->
    (Tensor[B, c2, H, W]). :meth:`fuse` folds each level's BatchNorm into its own copy of the
    conv (the fused module holds ``n_levels`` convs with bias; the shared weight is gone).
    """

    def __init__(self, c1: int, c2: int, k: int = 3, *, n_levels: int, act: bool | nn.Module = True) -> None:
        super().__init__()
        self.conv: nn.Conv2d | None = nn.Conv2d(c1, c2, k, 1, k // 2, bias=False)
        self.bns: nn.ModuleList | None = nn.ModuleList(
            nn.BatchNorm2d(c2, eps=BN_EPS, momentum=BN_MOMENTUM) for _ in range(n_levels))
        self.fused: nn.ModuleList | None = None
        self.act = make_act(act)

    def forward(self, x: Tensor, level: int) -> Tensor:
        if self.fused is not None:
            return self.act(self.fused[level](x))
        return self.act(self.bns[level](self.conv(x)))

    @torch.no_grad()
    def fuse(self) -> None:
        """Fold each level's BatchNorm into a per-level conv, in place (idempotent)."""
        if self.fused is not None:
            return
        self.fused = nn.ModuleList(fuse_conv_bn(self.conv, bn) for bn in self.bns)
        self.conv = None
        self.bns = None


class RTMDetSepBNHead(nn.Module):
    """RTMDet head: per branch (class, box) ``stacked`` 3x3 convs shared across levels with a
    BatchNorm per level, then unshared 1x1 prediction convs per level (``nc`` class logits,
    4 box distances).

    feats ([Tensor[B, c_in, h_i, w_i]]) -> [Tensor[B, 4 + nc, h_i, w_i]] (box first).
    """

    def __init__(self, *, nc: int, c_in: int, c_feat: int, stacked: int = 2, n_levels: int = 3) -> None:
        super().__init__()
        self.nc = nc
        self.cls_convs = nn.ModuleList(
            SharedConvSepBN(c_in if i == 0 else c_feat, c_feat, 3, n_levels=n_levels) for i in range(stacked))
        self.reg_convs = nn.ModuleList(
            SharedConvSepBN(c_in if i == 0 else c_feat, c_feat, 3, n_levels=n_levels) for i in range(stacked))
        self.rtm_cls = nn.ModuleList(nn.Conv2d(c_feat, nc, 1) for _ in range(n_levels))
        self.rtm_reg = nn.ModuleList(nn.Conv2d(c_feat, 4, 1) for _ in range(n_levels))

    @torch.no_grad()
    def init_weights(self, *, prior_prob: float = 0.01) -> None:
        """Reference initialisation: every conv N(0, 0.01), BatchNorm weight 1, class bias at the
        ``prior_prob`` prior (``-log((1 - p) / p)``), box bias 0."""
        for m in self.modules():
            if isinstance(m, nn.Conv2d):
                nn.init.normal_(m.weight, 0.0, 0.01)
                if m.bias is not None:
                    nn.init.zeros_(m.bias)
            elif isinstance(m, nn.BatchNorm2d):
                nn.init.ones_(m.weight)
                nn.init.zeros_(m.bias)
        for conv in self.rtm_cls:
            nn.init.constant_(conv.bias, -math.log((1 - prior_prob) / prior_prob))

    def forward(self, feats: list[Tensor]) -> list[Tensor]:
        out = []
        for level, x in enumerate(feats):
            c, r = x, x
            for m in self.cls_convs:
                c = m(c, level)
            for m in self.reg_convs:
                r = m(r, level)
            out.append(torch.cat((self.rtm_reg[level](r), self.rtm_cls[level](c)), 1))
        return out


class RTMDetNet(nn.Module):
    """RTMDet detector of one size (see :mod:`libreyolo.models._rtmdet.variants`).

    Attributes: ``nc``, ``strides`` ((8, 16, 32)), ``size``, ``exp_on_reg``.

    x (Tensor[B, 3, H, W], float RGB in [0, 1], H and W multiples of 32) ->
    [Tensor[B, 4 + nc, H / s, W / s] for s in (8, 16, 32)], raw regression then class logits.
    """

    def __init__(self, variant: RTMDetVariant, *, nc: int, head: Callable[..., nn.Module] | None = None) -> None:
        """``head``: the head's constructor, called as ``head(nc=, c_in=)`` with the neck width
        (default :class:`RTMDetSepBNHead`); it must have ``init_weights()``."""
        super().__init__()
        v = variant
        self.size = v.size
        self.nc = nc
        self.strides = STRIDES
        self.exp_on_reg = v.exp_on_reg
        self.register_buffer("pixel_mean", torch.tensor(PIXEL_MEAN).view(1, 3, 1, 1), persistent=False)
        self.register_buffer("pixel_std", torch.tensor(PIXEL_STD).view(1, 3, 1, 1), persistent=False)
        self.backbone = CSPNeXt(deepen=v.deepen, widen=v.widen)
        self.neck = CSPNeXtPAFPN(ch=self.backbone.out_channels, c_out=v.width, n=v.neck_blocks)
        if head is None:
            self.head: nn.Module = RTMDetSepBNHead(nc=nc, c_in=v.width, c_feat=v.width, stacked=2, n_levels=len(STRIDES))
        else:
            self.head = head(nc=nc, c_in=v.width)
        self.head.init_weights()

    def forward(self, x: Tensor) -> list[Tensor]:
        x = (x - self.pixel_mean.to(x.dtype)) / self.pixel_std.to(x.dtype)
        return self.head(self.neck(self.backbone(x)))

    def fuse(self) -> RTMDetNet:
        """Fold every BatchNorm into its conv, in place, for inference.

        Outputs equal the unfused eval-mode outputs within float tolerance. Parameters are
        replaced (optimizers / captured graphs holding the old ones must be rebuilt) and the
        fused network can no longer train its BatchNorms.
        """
        for m in self.modules():
            if isinstance(m, SharedConvSepBN):
                m.fuse()
        fuse_modules(self)
        return self


def build_rtmdet(*, size: str, nc: int) -> RTMDetNet:
    """Build an untrained RTMDet detector.

    Example:
        >>> net = build_rtmdet(size="t", nc=80)
        >>> [o.shape[1:] for o in net(torch.zeros(1, 3, 64, 64))]
        [torch.Size([84, 8, 8]), torch.Size([84, 4, 4]), torch.Size([84, 2, 2])]
    """
    if size not in VARIANTS:
        raise ConfigError(f"rtmdet has no size {size!r}; sizes: {', '.join(VARIANTS)}")
    if isinstance(nc, bool) or not isinstance(nc, int) or nc < 1:
        raise ConfigError(f"nc must be a positive int, got {nc!r}")
    return RTMDetNet(VARIANTS[size], nc=nc)
