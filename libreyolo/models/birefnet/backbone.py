"""BiRefNet's encoder: the hierarchical Swin Transformer backbone (Liu et al. 2021) as BiRefNet
configures it, run on the image and on its half-resolution copy.

The blocks are the shared ones (:mod:`libreyolo.layers.window_attention`: :class:`SwinBlock`,
:class:`PatchEmbed`, :class:`PatchMerging`); what differs from the Swin classifier
(:mod:`libreyolo.models.swin`) is the detection-style stage, as in BiRefNet's ``swin_v1.py``:

- every odd block of a stage shifts by half a window, whatever the grid size;
- a grid that is not a multiple of the window is zero-padded at the bottom/right after the first
  norm, and the padded tokens are **not** masked (only the shifted-window regions are, with
  ``-inf``, over the padded grid);
- patch merging closes stage i (i < 3), and each stage output goes through its own LayerNorm
  (``norm0`` .. ``norm3``) into the pyramid, channels first.

:class:`BiRefNetEncoder` runs the backbone on the standardised image and on its half-size copy
(bilinear, ``align_corners=True``), concatenates each level with the upsampled half-size one
(``mul_scl_ipt="cat"``: channels doubled) and concatenates the three finer levels, resized to the
coarsest, in front of it (``cxt``): Tensor[B, 3, H, W] in [0, 1] -> (standardised image, x1 .. x4).
"""

from __future__ import annotations

from dataclasses import dataclass

import torch
import torch.nn.functional as F
from torch import Tensor, nn

from ...layers.classify import IMAGENET_MEAN, IMAGENET_STD
from ...layers.init import trunc_normal_linears
from ...layers.window_attention import LN_EPS, PatchEmbed, PatchMerging, SwinBlock, window_mask


@dataclass(frozen=True)
class BiRefNetSpec:
    """One size: the Swin backbone (``dim`` doubled per stage, ``depths``, ``heads``, ``window``) and
    the decoder's widths (``inter``: the decoder blocks' inner width, 64 in the reference; ``aspp``:
    each ASPP branch, 256; ``ipt``: the image-patch convolutions' inner width, 64; ``gdt``: the
    gradient branch, 16)."""

    dim: int
    depths: tuple[int, ...]
    heads: tuple[int, ...]
    window: int
    mlp_ratio: float = 4.0
    drop_path: float = 0.2
    inter: int = 64
    aspp: int = 256
    ipt: int = 64
    gdt: int = 16


SPECS: dict[str, BiRefNetSpec] = {
    # a test size (not published): the same structure at a few channels
    "tiny": BiRefNetSpec(dim=8, depths=(2, 2, 2, 2), heads=(1, 2, 2, 4), window=4, inter=8, aspp=8, ipt=8, gdt=4),
    "lite": BiRefNetSpec(dim=96, depths=(2, 2, 6, 2), heads=(3, 6, 12, 24), window=7),  # BiRefNet_lite: Swin-T
    "l": BiRefNetSpec(dim=192, depths=(2, 2, 18, 2), heads=(6, 12, 24, 48), window=12),  # BiRefNet: Swin-L
}


def _resize(x: Tensor, size: tuple[int, int] | torch.Size) -> Tensor:
    """Bilinear with ``align_corners=True`` (BiRefNet's resampling everywhere); a no-op at the same size."""
    if tuple(x.shape[2:]) == tuple(size):
        return x
    return F.interpolate(x, size=tuple(size), mode="bilinear", align_corners=True)


class BackboneStage(nn.Module):
    """``blocks`` (plain / shifted windows alternating), then optional patch merging; returns
    (stage output, input of the next stage), channels last."""

    def __init__(self, dim: int, depth: int, heads: int, window: int, mlp_ratio: float, *, merge: bool,
                 drop_paths: list[float], fused_attn: bool) -> None:
        super().__init__()
        self.window = window
        self.blocks = nn.ModuleList(SwinBlock(dim, heads, window, mlp_ratio, drop_path=r, fused_attn=fused_attn)
                                    for r in drop_paths)
        self.downsample = PatchMerging(dim) if merge else None

    def forward(self, x: Tensor) -> tuple[Tensor, Tensor]:
        w = self.window
        h0, w0 = int(x.shape[1]), int(x.shape[2])
        padded = (-(-h0 // w) * w, -(-w0 // w) * w)
        s = w // 2
        mask = window_mask(padded, None, w, (s, s), device=x.device, dtype=x.dtype)
        mask = mask.masked_fill(mask != 0, float("-inf")) if mask is not None else None
        for i, block in enumerate(self.blocks):
            x = block(x, padded=padded, shift=(s, s) if i % 2 else (0, 0), mask=mask if i % 2 else None)
        return x, (self.downsample(x) if self.downsample is not None else x)


class SwinBackbone(nn.Module):
    """Standardised Tensor[B, 3, H, W] -> four maps Tensor[B, dim * 2**i, H / 2**(i+2), W / 2**(i+2)]."""

    def __init__(self, spec: BiRefNetSpec, *, fused_attn: bool = False) -> None:
        super().__init__()
        self.patch_embed = PatchEmbed(spec.dim, 4)
        total = sum(spec.depths)
        rates = [spec.drop_path * i / max(total - 1, 1) for i in range(total)]  # linear from 0
        layers, first, n = [], 0, len(spec.depths)
        for i, (depth, heads) in enumerate(zip(spec.depths, spec.heads, strict=True)):
            layers.append(BackboneStage(spec.dim * 2**i, depth, heads, spec.window, spec.mlp_ratio, merge=i < n - 1,
                                        drop_paths=rates[first:first + depth], fused_attn=fused_attn))
            first += depth
        self.layers = nn.ModuleList(layers)
        self.channels = [spec.dim * 2**i for i in range(n)]
        for i, c in enumerate(self.channels):
            self.add_module(f"norm{i}", nn.LayerNorm(c, eps=LN_EPS))
        trunc_normal_linears(self)

    def forward(self, x: Tensor) -> list[Tensor]:
        t = self.patch_embed(x)  # (B, H/4, W/4, C)
        outs = []
        for i, layer in enumerate(self.layers):
            out, t = layer(t)
            outs.append(getattr(self, f"norm{i}")(out).permute(0, 3, 1, 2).contiguous())
        return outs


class BiRefNetEncoder(nn.Module):
    """[0, 1] RGB Tensor[B, 3, H, W] -> (standardised image, x1, x2, x3, x4): the multi-scale-input
    pyramid (channels ``2 * dim * 2**i``), the context levels concatenated in front of x4."""

    def __init__(self, spec: BiRefNetSpec, *, fused_attn: bool = False) -> None:
        super().__init__()
        self.bb = SwinBackbone(spec, fused_attn=fused_attn)
        self.register_buffer("mean", torch.tensor(IMAGENET_MEAN).view(1, 3, 1, 1), persistent=False)
        self.register_buffer("std", torch.tensor(IMAGENET_STD).view(1, 3, 1, 1), persistent=False)

    def forward(self, x: Tensor) -> tuple[Tensor, Tensor, Tensor, Tensor, Tensor]:
        x = (x - self.mean.to(x.dtype)) / self.std.to(x.dtype)
        h, w = int(x.shape[2]), int(x.shape[3])
        full = self.bb(x)
        half = self.bb(F.interpolate(x, size=(h // 2, w // 2), mode="bilinear", align_corners=True))
        x1, x2, x3, x4 = (torch.cat([a, _resize(b, a.shape[2:])], dim=1) for a, b in zip(full, half, strict=True))
        x4 = torch.cat([_resize(x1, x4.shape[2:]), _resize(x2, x4.shape[2:]), _resize(x3, x4.shape[2:]), x4], dim=1)
        return x, x1, x2, x3, x4
