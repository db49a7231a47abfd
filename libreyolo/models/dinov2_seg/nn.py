"""DINOv2 semantic segmentation with the linear heads of the DINOv2 paper (Oquab et al., 2024, sec. 7.4).

=======  =====  =====  =====  ===========  ====================  =================================
size     width  depth  heads  blocks read  head input (channels)  params @150 classes (trunk + head)
=======  =====  =====  =====  ===========  ====================  =================================
s14      384    12     6      12           384                   22.06 M + 0.06 M
s14ms    384    12     6      9-12         1536                  22.06 M + 0.23 M
b14      768    12     12     12           768                   86.58 M + 0.12 M
b14ms    768    12     12     9-12         3072                  86.58 M + 0.47 M
l14      1024   24     16     24           1024                  304.37 M + 0.16 M
l14ms    1024   24     16     21-24        4096                  304.37 M + 0.62 M
=======  =====  =====  =====  ===========  ====================  =================================

The trunk is the DINOv2 ViT of the ``dinov2`` classify family (14 px patches, LayerScale, a
position embedding trained for 518 px and resampled). The head is the paper's: "linear" reads the
patch tokens of the last block; "+ms" (``..ms`` sizes) concatenates those of the last four blocks
(its multi-scale test-time augmentation is not part of the network). Either way the tokens, through
the trunk's final LayerNorm and without the class token, form a map on the token grid, then a
BatchNorm and a 1x1 convolution give the class logits at 1/14 of the input (the task upsamples
them to the image). Contract: Tensor[B, 3, H, W] float in [0, 1] -> logits Tensor[B, nc, H // 14,
W // 14], in train and eval mode; as in every DINOv2 family here, pixels past the last whole patch
are not read (the task letterboxes to multiples of 14, so none are left over).
"""

from __future__ import annotations

from dataclasses import dataclass

import torch
from torch import Tensor, nn

from ...errors import ConfigError
from ...layers.classify import IMAGENET_MEAN, IMAGENET_STD
from .._vit.net import ViTSpec
from .._vit.taps import TappedViT


@dataclass(frozen=True)
class SegSpec:
    """One size: the trunk ``vit`` and how many of its last blocks the head reads (1 or 4)."""

    vit: ViTSpec
    layers: int = 1

    @property
    def taps(self) -> tuple[int, ...]:
        return tuple(range(self.vit.depth - self.layers, self.vit.depth))


_DINO = {"patch": 14, "img_size": 518, "layer_scale": 1e-5}
_TRUNKS = {"s14": ViTSpec(dim=384, depth=12, heads=6, **_DINO), "b14": ViTSpec(dim=768, depth=12, heads=12, **_DINO),
           "l14": ViTSpec(dim=1024, depth=24, heads=16, **_DINO)}
SPECS: dict[str, SegSpec] = {}
for _name, _vit in _TRUNKS.items():
    SPECS[_name] = SegSpec(_vit, layers=1)
    SPECS[f"{_name}ms"] = SegSpec(_vit, layers=4)


class LinearSegHead(nn.Module):
    """Token maps -> logits: concatenate along channels, BatchNorm, 1x1 conv (module docstring)."""

    def __init__(self, channels: int, nc: int) -> None:
        super().__init__()
        self.bn = nn.BatchNorm2d(channels)
        self.conv_seg = nn.Conv2d(channels, nc, 1)
        nn.init.normal_(self.conv_seg.weight, std=0.01)  # as the reference head's initialisation
        nn.init.zeros_(self.conv_seg.bias)

    def forward(self, maps: list[Tensor]) -> Tensor:
        x = maps[0] if len(maps) == 1 else torch.cat(maps, dim=1)
        return self.conv_seg(self.bn(x))


class DINOv2Segmenter(nn.Module):
    """[0, 1] RGB -> class logits at 1/14 of the input (module docstring).

    Example:
        >>> spec = SegSpec(ViTSpec(dim=32, depth=4, heads=2, patch=14, img_size=28, layer_scale=1e-5), layers=4)
        >>> net = DINOv2Segmenter(spec, nc=3).eval()
        >>> tuple(net(torch.rand(1, 3, 42, 56)).shape)
        (1, 3, 3, 4)
    """

    def __init__(self, spec: SegSpec, *, nc: int, fused_attn: bool = False) -> None:
        super().__init__()
        if spec.layers < 1 or spec.layers > spec.vit.depth:
            raise ConfigError(f"a DINOv2 segmentation head reads 1..{spec.vit.depth} blocks, not {spec.layers}")
        self.spec, self.nc, self.patch = spec, nc, spec.vit.patch
        self.backbone = TappedViT(spec.vit, spec.taps, fused_attn=fused_attn)
        self.head = LinearSegHead(spec.vit.dim * spec.layers, nc)
        self.register_buffer("mean", torch.tensor(IMAGENET_MEAN).view(1, 3, 1, 1), persistent=False)
        self.register_buffer("std", torch.tensor(IMAGENET_STD).view(1, 3, 1, 1), persistent=False)

    def forward(self, x: Tensor) -> Tensor:
        x = (x - self.mean.to(x.dtype)) / self.std.to(x.dtype)
        return self.head(self.backbone(x))


def build_dinov2_seg(*, size: str, nc: int, fused_attn: bool = False) -> DINOv2Segmenter:
    """The network of one size (module docstring's table).

    Example:
        >>> net = build_dinov2_seg(size="s14", nc=150)
        >>> round(sum(p.numel() for p in net.parameters()) / 1e6, 2)
        22.11
    """
    if size not in SPECS:
        raise ConfigError(f"dinov2_seg has no size {size!r}; sizes: {', '.join(SPECS)}")
    return DINOv2Segmenter(SPECS[size], nc=nc, fused_attn=fused_attn)
