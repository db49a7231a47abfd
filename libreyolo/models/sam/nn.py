"""SAM's image encoder: a plain ViT with windowed and global attention, decomposed relative
position embeddings and a convolutional neck to ``out_chans`` channels at stride 16.

Parameter names follow the original ``segment-anything`` checkpoints (``image_encoder.*``).
Attention runs through the shared equation / SDPA decision with a ``fused_attn`` flag, off by
default (SPEC K-9); the relative-position term depends on the queries, so it is passed to the
shared equation as an additive bias.

forward(x Tensor[B, 3, H, W] normalised) -> Tensor[B, out_chans, H/16, W/16].
"""

from __future__ import annotations

import torch
import torch.nn.functional as F
from torch import Tensor, nn

from ...kernels.attention import use_sdpa
from ...layers.attention import attention_equation
from .._sam.prompt import LayerNorm2d


def rel_pos_table(q_size: int, k_size: int, rel_pos: Tensor) -> Tensor:
    """Relative-position embeddings Tensor[L, C] -> the table Tensor[q, k, C] for these sizes
    (linearly resampled when the table was trained for another length)."""
    n = 2 * max(q_size, k_size) - 1
    if rel_pos.shape[0] != n:
        rel_pos = F.interpolate(rel_pos.t().unsqueeze(0), size=n, mode="linear").squeeze(0).t()
    q = torch.arange(q_size, device=rel_pos.device)[:, None] * max(k_size / q_size, 1.0)
    k = torch.arange(k_size, device=rel_pos.device)[None, :] * max(q_size / k_size, 1.0)
    idx = (q - k) + (k_size - 1) * max(q_size / k_size, 1.0)
    return rel_pos[idx.long()]


class ViTAttention(nn.Module):
    """Multi-head attention over a (h, w) token grid with decomposed relative positions."""

    def __init__(self, dim: int, num_heads: int, rel_size: int, fused_attn: bool = False) -> None:
        super().__init__()
        self.num_heads = num_heads
        hd = dim // num_heads
        self.scale = hd**-0.5
        self.qkv = nn.Linear(dim, dim * 3)
        self.proj = nn.Linear(dim, dim)
        self.rel_pos_h = nn.Parameter(torch.zeros(2 * rel_size - 1, hd))
        self.rel_pos_w = nn.Parameter(torch.zeros(2 * rel_size - 1, hd))
        self.fused_attn = bool(fused_attn)

    def forward(self, x: Tensor) -> Tensor:
        b, h, w, d = x.shape
        qkv = self.qkv(x).view(b, h * w, 3, self.num_heads, -1).permute(2, 0, 3, 1, 4)
        q, k, v = qkv.unbind(0)  # each (B, H, hw, c)
        rh, rw = rel_pos_table(h, h, self.rel_pos_h), rel_pos_table(w, w, self.rel_pos_w)
        qg = q.reshape(b * self.num_heads, h, w, -1)
        bias_h = torch.einsum("bhwc,hkc->bhwk", qg, rh)  # (BH, h, w, h)
        bias_w = torch.einsum("bhwc,wkc->bhwk", qg, rw)  # (BH, h, w, w)
        bias = (bias_h[..., :, None] + bias_w[..., None, :]).reshape(b, self.num_heads, h * w, h * w)
        if use_sdpa(self.fused_attn):
            out = F.scaled_dot_product_attention(q, k, v, attn_mask=bias, scale=self.scale)
        else:
            out = attention_equation(q, k, v, scale=self.scale, bias=bias)
        out = out.view(b, self.num_heads, h, w, -1).permute(0, 2, 3, 1, 4).reshape(b, h, w, d)
        return self.proj(out)


class MLP(nn.Module):
    def __init__(self, dim: int, hidden: int) -> None:
        super().__init__()
        self.lin1 = nn.Linear(dim, hidden)
        self.lin2 = nn.Linear(hidden, dim)
        self.act = nn.GELU()

    def forward(self, x: Tensor) -> Tensor:
        return self.lin2(self.act(self.lin1(x)))


class Block(nn.Module):
    """Pre-norm transformer block; ``window > 0``: attention inside (zero-padded) windows."""

    def __init__(self, dim: int, num_heads: int, mlp_ratio: float, window: int, grid: int) -> None:
        super().__init__()
        self.norm1 = nn.LayerNorm(dim, eps=1e-6)
        self.attn = ViTAttention(dim, num_heads, window if window > 0 else grid)
        self.norm2 = nn.LayerNorm(dim, eps=1e-6)
        self.mlp = MLP(dim, int(dim * mlp_ratio))
        self.window = window

    def forward(self, x: Tensor) -> Tensor:
        y = self.norm1(x)
        if self.window > 0:
            b, h, w, c = y.shape
            s = self.window
            ph, pw = (s - h % s) % s, (s - w % s) % s
            y = F.pad(y, (0, 0, 0, pw, 0, ph))
            hp, wp = h + ph, w + pw
            y = y.view(b, hp // s, s, wp // s, s, c).permute(0, 1, 3, 2, 4, 5).reshape(-1, s, s, c)
            y = self.attn(y)
            y = y.view(b, hp // s, wp // s, s, s, c).permute(0, 1, 3, 2, 4, 5).reshape(b, hp, wp, c)
            y = y[:, :h, :w]
        else:
            y = self.attn(y)
        x = x + y
        return x + self.mlp(self.norm2(x))


class PatchEmbed(nn.Module):
    def __init__(self, dim: int, patch: int) -> None:
        super().__init__()
        self.proj = nn.Conv2d(3, dim, patch, patch)

    def forward(self, x: Tensor) -> Tensor:
        return self.proj(x).permute(0, 2, 3, 1)  # (B, h, w, C)


class ViTImageEncoder(nn.Module):
    """SAM's ViT image encoder (module docstring)."""

    def __init__(self, *, img_size: int, dim: int, depth: int, num_heads: int, global_attn: tuple[int, ...],
                 window: int, out_chans: int, patch: int = 16, mlp_ratio: float = 4.0) -> None:
        super().__init__()
        grid = img_size // patch
        self.patch_embed = PatchEmbed(dim, patch)
        self.pos_embed = nn.Parameter(torch.zeros(1, grid, grid, dim))
        self.blocks = nn.ModuleList(Block(dim, num_heads, mlp_ratio, 0 if i in global_attn else window, grid)
                                    for i in range(depth))
        self.neck = nn.Sequential(nn.Conv2d(dim, out_chans, 1, bias=False), LayerNorm2d(out_chans),
                                  nn.Conv2d(out_chans, out_chans, 3, padding=1, bias=False), LayerNorm2d(out_chans))

    def forward(self, x: Tensor) -> Tensor:
        x = self.patch_embed(x)
        pos = self.pos_embed
        if pos.shape[1:3] != x.shape[1:3]:  # another input size: resample the absolute table
            pos = F.interpolate(pos.permute(0, 3, 1, 2), size=tuple(x.shape[1:3]), mode="bicubic",
                                align_corners=False).permute(0, 2, 3, 1)
        x = x + pos
        for blk in self.blocks:
            x = blk(x)
        return self.neck(x.permute(0, 3, 1, 2))
