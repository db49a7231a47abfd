"""Depth Anything 3 (Lin et al., 2025) for one image: a DINOv2 ViT encoder (in the any-view sizes
with a camera token, alternating local / global attention, QK-norm and 2D RoPE in the later
blocks) and a DPT head that regresses **depth** (larger = farther, up to a scale) at the input
resolution.

========  =====  =====  =====  ===========  ==================  ======  ======  ===========  ===========
size      width  depth  heads  taps (0-b.)  neck widths         fusion  alt/    head         params
                                                                        rope/qk              (ours)
========  =====  =====  =====  ===========  ==================  ======  ======  ===========  ===========
s         384    12     6      5, 7, 9, 11  48, 96, 192, 384    64      4       depth+conf   24.99 M
b         768    12     12     5, 7, 9, 11  96, 192, 384, 768   128     4       depth+conf   98.29 M
mono_l    1024   24     16     4, 11, 17, 23 256, 512, 1024, 1024 256   off     depth+sky    334.17 M
metric_l  1024   24     16     4, 11, 17, 23 256, 512, 1024, 1024 256   off     depth+sky    334.17 M
========  =====  =====  =====  ===========  ==================  ======  ======  ===========  ===========

Tensor[B, 3, H, W] float in [0, 1] (H, W multiples of 14) -> ``(depth, aux)``, each Tensor[B, 1, H, W]
float, in train and eval mode (``aux``: the confidence ``exp(.) + 1`` of s / b, the sky probability
``relu(.)`` of the L sizes; ``net.aux_name`` says which):

1. ImageNet standardisation, 14 px patch embedding, class token, the position embedding (trained for
   518 px, resampled bicubically with the reference's 0.1 offset for other grids);
2. the blocks (:class:`libreyolo.models._vit.net.Block`). From block ``alt`` (s / b: 4) on, the
   class token is replaced by the learned reference-view camera token, every odd block is the
   reference's "global" (cross-view) attention -- over one image's tokens, with all grid tokens at
   RoPE position (1, 1) -- and the others "local" attention with the grid tokens at their (row + 1,
   column + 1) (special tokens at 0); QK-norm in the same blocks;
3. taps: the patch tokens after the tapped blocks; with ``cat_token`` (s / b) the output of the
   latest local block (as is) concatenated with the tapped output through the final LayerNorm
   (2 x width channels), else the tapped output through the final LayerNorm; s / b pass them
   through a LayerNorm (eps 1e-5) of the head;
4. the DPT neck (:class:`libreyolo.models._dpt.neck.Neck`; s / b add the UV embedding after the
   projections);
5. head: 3x3 conv to half the fusion width, bilinear upsampling to (H, W) (``align_corners=True``),
   (s / b: + the UV embedding), then per output a 3x3 conv to 32, ReLU, 1x1 conv: depth = ``exp``;
   s / b: the second channel of the same conv is the confidence ``exp + 1``; L: a second branch
   (``sky_conv2/3``) gives ``relu`` sky.

No data-dependent control flow: static input shapes choose sizes (CUDA-graph capturable). The sky
step (sky pixels set to the far depth) is data-dependent and lives outside the network
(:func:`~.postprocess.sky_step`).
"""

from __future__ import annotations

from dataclasses import dataclass

import torch
import torch.nn.functional as F
from torch import Tensor, nn

from ...errors import ConfigError
from ...layers.classify import IMAGENET_MEAN, IMAGENET_STD
from ...layers.init import trunc_normal_linears
from .._dpt.neck import Neck, add_uv_embed
from .._vit.net import LN_EPS, Block, PatchEmbed, ViTSpec, resample_pos_embed
from .._vit.rope import grid_positions, rope_2d

POS_OFFSET = 0.1  # the DINOv2 reference's position-embedding resampling offset


@dataclass(frozen=True)
class DA3Spec:
    """One size: the encoder ``vit``, 0-based ``taps``, ``alt`` (first block of the camera token,
    alternating attention, QK-norm and RoPE; -1: none), ``cat_token``, the four ``neck`` widths, the
    ``fusion`` width, ``dual`` (the any-view head: token LayerNorm, UV embeddings, depth + confidence)
    or not (depth + sky)."""

    vit: ViTSpec
    taps: tuple[int, int, int, int]
    neck: tuple[int, int, int, int]
    fusion: int
    alt: int = -1
    cat_token: bool = False
    dual: bool = False
    head_hidden: int = 32
    rope_base: float = 100.0


_DINO = {"patch": 14, "img_size": 518, "layer_scale": 1.0, "drop_path": 0.0}
_L = DA3Spec(ViTSpec(dim=1024, depth=24, heads=16, **_DINO), taps=(4, 11, 17, 23), neck=(256, 512, 1024, 1024),
             fusion=256)
SPECS: dict[str, DA3Spec] = {
    "s": DA3Spec(ViTSpec(dim=384, depth=12, heads=6, **_DINO), taps=(5, 7, 9, 11), neck=(48, 96, 192, 384),
                 fusion=64, alt=4, cat_token=True, dual=True),
    "b": DA3Spec(ViTSpec(dim=768, depth=12, heads=12, **_DINO), taps=(5, 7, 9, 11), neck=(96, 192, 384, 768),
                 fusion=128, alt=4, cat_token=True, dual=True),
    "mono_l": _L,
    "metric_l": _L,
}


class DA3Encoder(nn.Module):
    """The ViT, returning the tapped patch tokens as (B, C, h, w) maps (module docstring, 1-3)."""

    def __init__(self, spec: DA3Spec, *, fused_attn: bool) -> None:
        super().__init__()
        v = spec.vit
        if v.img_size % v.patch:
            raise ConfigError(f"img_size={v.img_size} is not a multiple of patch={v.patch}")
        g = v.img_size // v.patch
        self.grid, self.taps, self.alt, self.cat = (g, g), tuple(spec.taps), spec.alt, spec.cat_token
        self.head_dim, self.rope_base = v.dim // v.heads, spec.rope_base
        self.patch_embed = PatchEmbed(v.dim, v.patch)
        self.cls_token = nn.Parameter(torch.zeros(1, 1, v.dim))
        # (1, 2, D): the reference view's token, then the other views' (unused for one image)
        self.camera_token = nn.Parameter(torch.randn(1, 2, v.dim)) if spec.alt >= 0 else None
        self.pos_embed = nn.Parameter(torch.zeros(1, 1 + g * g, v.dim))
        self.blocks = nn.ModuleList(Block(v.dim, v.heads, v.mlp_ratio, drop_path=v.drop_path, fused_attn=fused_attn,
                                          layer_scale=v.layer_scale, qk_norm=0 <= spec.alt <= i)
                                    for i in range(max(spec.taps) + 1))
        self.norm = nn.LayerNorm(v.dim, eps=LN_EPS)
        nn.init.trunc_normal_(self.pos_embed, std=0.02)
        nn.init.normal_(self.cls_token, std=1e-6)
        trunc_normal_linears(self)

    def forward(self, x: Tensor) -> list[Tensor]:
        t, (gh, gw) = self.patch_embed(x)
        b = t.shape[0]
        t = torch.cat([self.cls_token.expand(b, -1, -1), t], dim=1)
        t = t + resample_pos_embed(self.pos_embed, (gh, gw), trained=self.grid, offset=POS_OFFSET)
        local_rope = global_rope = None
        if self.alt >= 0:
            local_rope = rope_2d(grid_positions(gh, gw, prefix=1, device=t.device), self.head_dim, base=self.rope_base)
            global_rope = rope_2d(grid_positions(gh, gw, prefix=1, device=t.device, flat=True), self.head_dim,
                                  base=self.rope_base)
        maps, local = [], t
        for i, blk in enumerate(self.blocks):
            if self.camera_token is not None and i == self.alt:
                t = torch.cat([self.camera_token[:, :1].expand(b, -1, -1).to(t.dtype), t[:, 1:]], dim=1)
            is_global = 0 <= self.alt <= i and i % 2 == 1
            rope = None if self.alt < 0 or i < self.alt else (global_rope if is_global else local_rope)
            t = blk(t, rope=rope)
            if not is_global:
                local = t
            if i in self.taps:
                out = torch.cat([local, self.norm(t)], dim=-1) if self.cat else self.norm(t)
                p = out[:, 1:]  # (B, h*w, C)
                maps.append(p.transpose(1, 2).reshape(b, p.shape[2], gh, gw))
        return maps


class DA3Head(nn.Module):
    """(B, fusion, 8h, 8w) -> depth and aux Tensor[B, 1, 14h, 14w] (module docstring, 5)."""

    def __init__(self, fusion: int, hidden: int, *, dual: bool) -> None:
        super().__init__()
        self.dual = dual
        self.conv1 = nn.Conv2d(fusion, fusion // 2, 3, padding=1)
        self.conv2 = nn.Conv2d(fusion // 2, hidden, 3, padding=1)
        self.conv3 = nn.Conv2d(hidden, 2 if dual else 1, 1)
        if not dual:
            self.sky_conv2 = nn.Conv2d(fusion // 2, hidden, 3, padding=1)
            self.sky_conv3 = nn.Conv2d(hidden, 1, 1)

    def forward(self, x: Tensor, out_hw: tuple[int, int], aspect: float) -> tuple[Tensor, Tensor]:
        y = F.interpolate(self.conv1(x), size=out_hw, mode="bilinear", align_corners=True)
        if self.dual:
            y = add_uv_embed(y, aspect)
        logits = self.conv3(F.relu(self.conv2(y)))
        if self.dual:
            return torch.exp(logits[:, :1]), torch.exp(logits[:, 1:]) + 1
        return torch.exp(logits), torch.relu(self.sky_conv3(F.relu(self.sky_conv2(y))))


class DepthAnything3(nn.Module):
    """[0, 1] RGB -> (depth, aux) Tensor[B, 1, H, W] each (module docstring).

    Example:
        >>> spec = DA3Spec(ViTSpec(dim=32, depth=4, heads=2, patch=14, img_size=28, layer_scale=1.0, drop_path=0.0),
        ...                taps=(0, 1, 2, 3), neck=(8, 8, 16, 16), fusion=16, alt=2, cat_token=True, dual=True,
        ...                head_hidden=8)
        >>> [tuple(o.shape) for o in DepthAnything3(spec).eval()(torch.rand(1, 3, 42, 56))]
        [(1, 1, 42, 56), (1, 1, 42, 56)]
    """

    def __init__(self, spec: DA3Spec, *, fused_attn: bool = False) -> None:
        super().__init__()
        self.spec, self.patch = spec, spec.vit.patch
        self.aux_name = "conf" if spec.dual else "sky"
        width = spec.vit.dim * (2 if spec.cat_token else 1)
        self.encoder = DA3Encoder(spec, fused_attn=fused_attn)
        self.token_norm = nn.LayerNorm(width) if spec.dual else None
        self.neck = Neck(width, spec.neck, spec.fusion, uv=spec.dual)
        self.head = DA3Head(spec.fusion, spec.head_hidden, dual=spec.dual)
        self.register_buffer("mean", torch.tensor(IMAGENET_MEAN).view(1, 3, 1, 1), persistent=False)
        self.register_buffer("std", torch.tensor(IMAGENET_STD).view(1, 3, 1, 1), persistent=False)

    def forward(self, x: Tensor) -> tuple[Tensor, Tensor]:
        gh, gw = int(x.shape[2]) // self.patch, int(x.shape[3]) // self.patch
        aspect = (gw * self.patch) / (gh * self.patch)
        x = (x - self.mean.to(x.dtype)) / self.std.to(x.dtype)
        maps = self.encoder(x)
        if self.token_norm is not None:
            norm = self.token_norm
            maps = [norm(m.permute(0, 2, 3, 1)).permute(0, 3, 1, 2) for m in maps]
        return self.head(self.neck(maps, aspect), (gh * self.patch, gw * self.patch), aspect)


def build_depth_anything3(*, size: str, fused_attn: bool = False) -> DepthAnything3:
    """The network of one size (:data:`SPECS`).

    Example:
        >>> round(sum(p.numel() for p in build_depth_anything3(size="s").parameters()) / 1e6, 2)
        24.99
    """
    if size not in SPECS:
        raise ConfigError(f"depth_anything3 has no size {size!r}; sizes: {', '.join(SPECS)}")
    return DepthAnything3(SPECS[size], fused_attn=fused_attn)
