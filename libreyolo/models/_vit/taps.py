"""A ViT that returns the patch tokens of chosen blocks as feature maps (dense-prediction heads).

Depth Anything's DPT decoder and DINOv2's linear segmentation heads read the same thing from a
DINOv2 trunk: after the listed 0-based blocks (``taps``), the tokens through the final LayerNorm,
class token dropped, reshaped to ``(B, D, H/patch, W/patch)`` maps on the token grid. Blocks after
the last tap are not built (they would be dead weight).
"""

from __future__ import annotations

import torch
from torch import Tensor, nn

from ...errors import ConfigError
from ...layers.init import trunc_normal_linears
from .net import LN_EPS, Block, PatchEmbed, ViTSpec, resample_pos_embed


class TappedViT(nn.Module):
    """Standardised images Tensor[B, 3, H, W] -> one Tensor[B, D, H/p, W/p] per tap (module docstring).

    The position embedding is trained for ``spec.img_size`` and resampled for other grids.

    Example:
        >>> vit = TappedViT(ViTSpec(dim=32, depth=4, heads=2, patch=14, img_size=28), taps=(1, 3), fused_attn=False)
        >>> [tuple(m.shape) for m in vit(torch.rand(1, 3, 42, 56))]
        [(1, 32, 3, 4), (1, 32, 3, 4)]
        >>> len(vit.blocks)  # up to the last tap
        4
    """

    NO_WEIGHT_DECAY = ("cls_token", "pos_embed")  # exempt from weight decay (training.optim.param_groups)

    def __init__(self, spec: ViTSpec, taps: tuple[int, ...], *, fused_attn: bool) -> None:
        super().__init__()
        if spec.img_size % spec.patch:
            raise ConfigError(f"img_size={spec.img_size} is not a multiple of patch={spec.patch}")
        if not taps or min(taps) < 0 or max(taps) >= spec.depth:
            raise ConfigError(f"taps={tuple(taps)} must be block indices in 0..{spec.depth - 1}")
        g = spec.img_size // spec.patch
        self.grid, self.taps = (g, g), tuple(taps)
        self.patch_embed = PatchEmbed(spec.dim, spec.patch)
        self.cls_token = nn.Parameter(torch.zeros(1, 1, spec.dim))
        self.pos_embed = nn.Parameter(torch.zeros(1, 1 + g * g, spec.dim))
        self.blocks = nn.ModuleList(Block(spec.dim, spec.heads, spec.mlp_ratio, drop_path=spec.drop_path,
                                          fused_attn=fused_attn, layer_scale=spec.layer_scale)
                                    for _ in range(max(taps) + 1))
        self.norm = nn.LayerNorm(spec.dim, eps=LN_EPS)
        nn.init.trunc_normal_(self.pos_embed, std=0.02)
        nn.init.normal_(self.cls_token, std=1e-6)
        trunc_normal_linears(self)

    def forward(self, x: Tensor) -> list[Tensor]:
        t, (gh, gw) = self.patch_embed(x)
        cls = self.cls_token.expand(t.shape[0], -1, -1)
        t = torch.cat([cls, t], dim=1) + resample_pos_embed(self.pos_embed, (gh, gw), trained=self.grid)
        maps = []
        for i, blk in enumerate(self.blocks):
            t = blk(t)
            if i in self.taps:
                p = self.norm(t)[:, 1:]
                maps.append(p.transpose(1, 2).reshape(p.shape[0], p.shape[2], gh, gw))
        return maps
