"""Depth Anything V2 (Yang et al., 2024): a DINOv2 ViT encoder and a DPT decoder (Ranftl et al., 2021)
that regresses a relative (affine-invariant, inverse-depth-like) map at the input resolution.

=====  =====  =====  =====  ===============  ===================  ======  ======================
size   width  depth  heads  blocks read      neck widths          fusion  params (ours / published)
=====  =====  =====  =====  ===============  ===================  ======  ======================
s      384    12     6      3, 6, 9, 12      48, 96, 192, 384     64      24.71 M / 24.8 M
b      768    12     12     3, 6, 9, 12      96, 192, 384, 768    128     97.2 M / 97.5 M
=====  =====  =====  =====  ===============  ===================  ======  ======================

Tensor[B, 3, H, W] float in [0, 1] (H, W multiples of the 14 px patch) -> depth Tensor[B, 1, H, W]
float >= 0 (larger = nearer, as the published relative models), in train and eval mode:

1. standardise with the ImageNet mean / std, patch-embed (14 px), prepend the class token, add the
   position embedding (trained for 518 px, resampled bicubically for other grids);
2. run the DINOv2 blocks (:class:`libreyolo.models._vit.net.Block`, LayerScale, fused-attention
   flag of SPEC K-9) and keep the patch tokens after blocks 3, 6, 9, 12, each through the final
   LayerNorm, as four (B, D, h, w) maps on the token grid (h, w) = (H/14, W/14);
3. the DPT neck (:class:`libreyolo.models._dpt.neck.Neck`) -- reassemble: a 1x1 projection to the
   neck width, then a resize to 4x (transposed conv 4/4),
   2x (transposed conv 2/2), 1x, 1/2x (3x3 conv, stride 2); a 3x3 conv (no bias) to the fusion
   width;
4. fuse from the coarsest map up: ``x = rcu2(x + rcu1(skip))`` (the coarsest has no ``x`` yet),
   bilinear upsampling (``align_corners=True``) to the next map's size (2x after the last), a 1x1
   projection; ``rcu`` = ``y + conv(relu(conv(relu(y))))`` (3x3 convs);
5. head: 3x3 conv to half the fusion width, bilinear upsampling to (14h, 14w) (``align_corners=
   True``), 3x3 conv to 32, ReLU, 1x1 conv to 1, ReLU.

The forward has no data-dependent control flow: only static input shapes choose sizes.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch
import torch.nn.functional as F
from torch import Tensor, nn

from ...errors import ConfigError
from ...layers.classify import IMAGENET_MEAN, IMAGENET_STD
from .._dpt.neck import Neck
from .._vit.net import ViTSpec
from .._vit.taps import TappedViT


@dataclass(frozen=True)
class DepthSpec:
    """One size: the encoder ``vit``, the 0-based ``taps`` (blocks whose outputs feed the decoder),
    the four ``neck`` widths, the ``fusion`` width and the head's ``head_hidden`` width."""

    vit: ViTSpec
    taps: tuple[int, int, int, int]
    neck: tuple[int, int, int, int]
    fusion: int
    head_hidden: int = 32


_DINO = {"patch": 14, "img_size": 518, "layer_scale": 1e-5, "drop_path": 0.0}
SPECS: dict[str, DepthSpec] = {
    "s": DepthSpec(ViTSpec(dim=384, depth=12, heads=6, **_DINO), taps=(2, 5, 8, 11), neck=(48, 96, 192, 384),
                   fusion=64),
    "b": DepthSpec(ViTSpec(dim=768, depth=12, heads=12, **_DINO), taps=(2, 5, 8, 11), neck=(96, 192, 384, 768),
                   fusion=128),
}


class DepthHead(nn.Module):
    """(B, fusion, 8h, 8w) -> (B, 1, 14h, 14w): conv, upsample to the input size, conv, ReLU, conv, ReLU."""

    def __init__(self, fusion: int, hidden: int) -> None:
        super().__init__()
        self.conv1 = nn.Conv2d(fusion, fusion // 2, 3, padding=1)
        self.conv2 = nn.Conv2d(fusion // 2, hidden, 3, padding=1)
        self.conv3 = nn.Conv2d(hidden, 1, 1)

    def forward(self, x: Tensor, out_hw: tuple[int, int]) -> Tensor:
        y = F.interpolate(self.conv1(x), size=out_hw, mode="bilinear", align_corners=True)
        return F.relu(self.conv3(F.relu(self.conv2(y))))


class DepthAnything(nn.Module):
    """[0, 1] RGB -> relative depth Tensor[B, 1, H, W] (module docstring).

    Example:
        >>> spec = DepthSpec(ViTSpec(dim=32, depth=4, heads=2, patch=14, img_size=28), taps=(0, 1, 2, 3),
        ...                  neck=(8, 8, 16, 16), fusion=16, head_hidden=8)
        >>> tuple(DepthAnything(spec).eval()(torch.rand(1, 3, 42, 56)).shape)
        (1, 1, 42, 56)
    """

    def __init__(self, spec: DepthSpec, *, fused_attn: bool = False) -> None:
        super().__init__()
        self.spec, self.patch = spec, spec.vit.patch
        self.encoder = TappedViT(spec.vit, spec.taps, fused_attn=fused_attn)
        self.neck = Neck(spec.vit.dim, spec.neck, spec.fusion)
        self.head = DepthHead(spec.fusion, spec.head_hidden)
        self.register_buffer("mean", torch.tensor(IMAGENET_MEAN).view(1, 3, 1, 1), persistent=False)
        self.register_buffer("std", torch.tensor(IMAGENET_STD).view(1, 3, 1, 1), persistent=False)

    def forward(self, x: Tensor) -> Tensor:
        gh, gw = int(x.shape[2]) // self.patch, int(x.shape[3]) // self.patch
        x = (x - self.mean.to(x.dtype)) / self.std.to(x.dtype)
        return self.head(self.neck(self.encoder(x)), (gh * self.patch, gw * self.patch))


def build_depth_anything(*, size: str, fused_attn: bool = False) -> DepthAnything:
    """The network of one size (:data:`SPECS`).

    Example:
        >>> round(sum(p.numel() for p in build_depth_anything(size="s").parameters()) / 1e6, 2)
        24.71
    """
    if size not in SPECS:
        raise ConfigError(f"depth_anything has no size {size!r}; sizes: {', '.join(SPECS)}")
    return DepthAnything(SPECS[size], fused_attn=fused_attn)
