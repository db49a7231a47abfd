"""RTMDet-Ins instance-segmentation network (sizes t, s, m, l, x): the RTMDet lineage trunk (CSPNeXt
backbone, CSPNeXt-PAFPN neck, :mod:`libreyolo.models._rtmdet.net`) with the instance head.

Contract (the rest of the library depends on it): input Tensor[B, 3, H, W] float RGB in [0, 1], H
and W multiples of 32; output, in train and eval mode alike, a list of four tensors:

- for strides 8, 16, 32: Tensor[B, 4 + nc + 169, H / s, W / s]: box distances (left, top, right,
  bottom from the level's grid point, in stride units, already through ReLU), class logits, then
  the 169 parameters of each point's dynamic mask kernel (:data:`PARAM_SPLITS`);
- the mask features Tensor[B, 8, H / 8, W / 8] (``num_prototypes = 8``).

The dynamic convolution that turns a kept detection's kernel and the mask features into its mask
runs after NMS, eagerly (:mod:`.postprocess`); the forward is static and CUDA-graph capturable.
"""

from __future__ import annotations

import math

import torch
import torch.nn.functional as F
from torch import Tensor, nn

from ...errors import ConfigError
from ...layers.conv import ConvBNAct
from .._rtmdet.net import STRIDES, RTMDetNet, SharedConvSepBN
from .._rtmdet.variants import VARIANTS as RTMDET_VARIANTS

SIZES = ("t", "s", "m", "l", "x")  # the RTMDet trunk sizes (_rtmdet/variants.py)
NUM_PROTOTYPES = 8  # mask-feature channels
DYCONV_CHANNELS = 8  # hidden width of the dynamic convolution
NUM_DYCONVS = 3  # 1x1 layers: (8 + 2) -> 8 -> 8 -> 1
MASK_HEAD_CONVS = 4  # stacked 3x3 convs of the mask-feature branch


def dynamic_param_splits(*, num_prototypes: int = NUM_PROTOTYPES, channels: int = DYCONV_CHANNELS,
                         n_layers: int = NUM_DYCONVS) -> tuple[tuple[int, ...], tuple[int, ...]]:
    """Sizes of the per-point kernel vector, in its order: every layer's weights, then every
    layer's biases. The first layer reads the ``num_prototypes`` features plus 2 relative
    coordinates; the last writes one mask logit.

    Example:
        >>> dynamic_param_splits()
        ((80, 64, 8), (8, 8, 1))
    """
    dims = [num_prototypes + 2] + [channels] * (n_layers - 1) + [1]
    weights = tuple(dims[i] * dims[i + 1] for i in range(n_layers))
    biases = tuple(dims[i + 1] for i in range(n_layers))
    return weights, biases


PARAM_SPLITS = dynamic_param_splits()
NUM_PARAMS = sum(PARAM_SPLITS[0]) + sum(PARAM_SPLITS[1])  # 169


class MaskFeatHead(nn.Module):
    """Mask-feature branch: the coarser levels resized (bilinear) to the stride-8 level,
    concatenated, a 1x1 conv (with bias) back to ``c_in``, ``n_convs`` 3x3 ConvBNAct to ``c_feat``,
    a 1x1 conv (with bias) to ``num_prototypes``.

    feats ([Tensor[B, c_in, h_i, w_i]], finest first) -> Tensor[B, num_prototypes, h_0, w_0].

    Example:
        >>> MaskFeatHead(16, 16)([torch.zeros(1, 16, 8, 8), torch.zeros(1, 16, 4, 4),
        ...                       torch.zeros(1, 16, 2, 2)]).shape
        torch.Size([1, 8, 8, 8])
    """

    def __init__(self, c_in: int, c_feat: int, *, n_levels: int = 3, n_convs: int = MASK_HEAD_CONVS,
                 num_prototypes: int = NUM_PROTOTYPES) -> None:
        super().__init__()
        self.fusion_conv = nn.Conv2d(n_levels * c_in, c_in, 1)
        self.stacked_convs = nn.Sequential(*(ConvBNAct(c_in if i == 0 else c_feat, c_feat, 3) for i in range(n_convs)))
        self.projection = nn.Conv2d(c_feat, num_prototypes, 1)

    def forward(self, feats: list[Tensor]) -> Tensor:
        size = feats[0].shape[-2:]
        fused = [feats[0], *(F.interpolate(f, size=size, mode="bilinear", align_corners=False) for f in feats[1:])]
        return self.projection(self.stacked_convs(self.fusion_conv(torch.cat(fused, 1))))


class RTMDetInsHead(nn.Module):
    """RTMDet-Ins head. Per level: one tower of ``stacked`` 3x3 convs whose weights the three
    levels share (a BatchNorm per level) feeds both the class and the box prediction (the
    reference's ``RTMDetInsSepBNHead`` registers its box tower as the class tower); a kernel tower
    of ``stacked`` 3x3 ConvBNAct of its own per level; 1x1 prediction convs per level (``nc``
    logits, 4 distances through ReLU, :data:`NUM_PARAMS` kernel parameters). Plus the
    :class:`MaskFeatHead`.

    feats ([Tensor[B, c_in, h_i, w_i]]) -> [Tensor[B, 4 + nc + NUM_PARAMS, h_i, w_i] per level,
    mask features Tensor[B, NUM_PROTOTYPES, h_0, w_0]].
    """

    def __init__(self, *, nc: int, c_in: int, c_feat: int | None = None, stacked: int = 2, n_levels: int = 3) -> None:
        super().__init__()
        c_feat = c_in if c_feat is None else c_feat
        self.nc = nc
        self.cls_convs = nn.ModuleList(
            SharedConvSepBN(c_in if i == 0 else c_feat, c_feat, 3, n_levels=n_levels) for i in range(stacked))
        self.kernel_convs = nn.ModuleList(
            nn.Sequential(*(ConvBNAct(c_in if i == 0 else c_feat, c_feat, 3) for i in range(stacked)))
            for _ in range(n_levels))
        self.rtm_cls = nn.ModuleList(nn.Conv2d(c_feat, nc, 1) for _ in range(n_levels))
        self.rtm_reg = nn.ModuleList(nn.Conv2d(c_feat, 4, 1) for _ in range(n_levels))
        self.rtm_kernel = nn.ModuleList(nn.Conv2d(c_feat, NUM_PARAMS, 1) for _ in range(n_levels))
        self.mask_head = MaskFeatHead(c_in, c_feat, n_levels=n_levels)

    @torch.no_grad()
    def init_weights(self, *, prior_prob: float = 0.01) -> None:
        """Reference initialisation: every conv N(0, 0.01) with zero bias, BatchNorm weight 1, class
        bias at the ``prior_prob`` prior, box bias 1 (so the ReLU starts open)."""
        for m in self.modules():
            if isinstance(m, nn.Conv2d):
                nn.init.normal_(m.weight, 0.0, 0.01)
                if m.bias is not None:
                    nn.init.zeros_(m.bias)
            elif isinstance(m, nn.BatchNorm2d):
                nn.init.ones_(m.weight)
                nn.init.zeros_(m.bias)
        for cls_conv, reg_conv in zip(self.rtm_cls, self.rtm_reg, strict=True):
            nn.init.constant_(cls_conv.bias, -math.log((1 - prior_prob) / prior_prob))
            nn.init.ones_(reg_conv.bias)

    def forward(self, feats: list[Tensor]) -> list[Tensor]:
        mask_feat = self.mask_head(feats)
        out = []
        for level, x in enumerate(feats):
            c = x
            for m in self.cls_convs:
                c = m(c, level)
            k = self.kernel_convs[level](x)
            out.append(torch.cat((F.relu(self.rtm_reg[level](c)), self.rtm_cls[level](c), self.rtm_kernel[level](k)), 1))
        return [*out, mask_feat]


def build_rtmdet_ins(*, size: str, nc: int) -> RTMDetNet:
    """Build an untrained RTMDet-Ins network: the RTMDet trunk of that size with
    :class:`RTMDetInsHead`. Attributes as :class:`~libreyolo.models._rtmdet.net.RTMDetNet` plus
    ``num_prototypes``, ``num_params``.

    Example:
        >>> net = build_rtmdet_ins(size="t", nc=3)
        >>> [tuple(o.shape[1:]) for o in net(torch.zeros(1, 3, 64, 64))]
        [(176, 8, 8), (176, 4, 4), (176, 2, 2), (8, 8, 8)]
    """
    if size not in SIZES:
        raise ConfigError(f"rtmdet_ins has no size {size!r}; sizes: {', '.join(SIZES)}")
    if isinstance(nc, bool) or not isinstance(nc, int) or nc < 1:
        raise ConfigError(f"nc must be a positive int, got {nc!r}")
    net = RTMDetNet(RTMDET_VARIANTS[size], nc=nc,
                    head=lambda *, nc, c_in: RTMDetInsHead(nc=nc, c_in=c_in, n_levels=len(STRIDES)))
    net.exp_on_reg = False  # distances are ReLU(raw), never exp
    net.num_prototypes = NUM_PROTOTYPES  # type: ignore[assignment]
    net.num_params = NUM_PARAMS  # type: ignore[assignment]
    return net
