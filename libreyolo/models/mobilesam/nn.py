"""MobileSAM's image encoder: TinyViT-5M (Wu et al., 2022) as MobileSAM modifies it for 1024 px
inputs (the last patch merging keeps stride 1, so the embedding stays at stride 16) with SAM's
256-channel neck.

Parameter names follow the MobileSAM checkpoint (``image_encoder.patch_embed.seq.0.c``,
``layers.<i>.blocks.<j>``, ``layers.<i>.downsample``, ``neck.<k>``); its unused classification
head is not built. Attention runs through the shared equation / SDPA decision with a
``fused_attn`` flag, off by default (SPEC K-9); the learned per-offset bias is the additive bias.

forward(x Tensor[B, 3, H, W] normalised) -> Tensor[B, 256, H/16, W/16].
"""

from __future__ import annotations

import itertools

import torch
import torch.nn.functional as F
from torch import Tensor, nn

from ...kernels.attention import use_sdpa
from ...layers.attention import attention_equation
from .._sam.prompt import LayerNorm2d


class ConvBN(nn.Sequential):
    """Conv2d (no bias) + BatchNorm2d, named ``c`` and ``bn`` as in the reference."""

    def __init__(self, cin: int, cout: int, k: int = 1, s: int = 1, p: int = 0, groups: int = 1,
                 bn_weight_init: float = 1.0) -> None:
        super().__init__()
        self.add_module("c", nn.Conv2d(cin, cout, k, s, p, groups=groups, bias=False))
        bn = nn.BatchNorm2d(cout)
        nn.init.constant_(bn.weight, bn_weight_init)
        self.add_module("bn", bn)


class PatchEmbed(nn.Module):
    def __init__(self, dim: int) -> None:
        super().__init__()
        self.seq = nn.Sequential(ConvBN(3, dim // 2, 3, 2, 1), nn.GELU(), ConvBN(dim // 2, dim, 3, 2, 1))

    def forward(self, x: Tensor) -> Tensor:
        return self.seq(x)


class MBConv(nn.Module):
    def __init__(self, dim: int, expand: float) -> None:
        super().__init__()
        h = int(dim * expand)
        self.conv1 = ConvBN(dim, h)
        self.conv2 = ConvBN(h, h, 3, 1, 1, groups=h)
        self.conv3 = ConvBN(h, dim, bn_weight_init=0.0)
        self.act = nn.GELU()

    def forward(self, x: Tensor) -> Tensor:
        y = self.act(self.conv1(x))
        y = self.act(self.conv2(y))
        return self.act(x + self.conv3(y))


class PatchMerging(nn.Module):
    def __init__(self, dim: int, out_dim: int, stride: int) -> None:
        super().__init__()
        self.conv1 = ConvBN(dim, out_dim)
        self.conv2 = ConvBN(out_dim, out_dim, 3, stride, 1, groups=out_dim)
        self.conv3 = ConvBN(out_dim, out_dim)
        self.act = nn.GELU()

    def forward(self, x: Tensor) -> Tensor:
        return self.conv3(self.act(self.conv2(self.act(self.conv1(x)))))


def offset_index(res: int) -> Tensor:
    """Tensor[N, N] int64: the index of each (query, key) pair's |dy|, |dx| offset on a res x res window."""
    points = list(itertools.product(range(res), range(res)))
    offsets: dict[tuple[int, int], int] = {}
    idx = []
    for p1 in points:
        for p2 in points:
            off = (abs(p1[0] - p2[0]), abs(p1[1] - p2[1]))
            idx.append(offsets.setdefault(off, len(offsets)))
    return torch.tensor(idx, dtype=torch.int64).view(len(points), len(points))


class WindowAttention(nn.Module):
    """LayerNorm, per-head interleaved qkv, learned per-offset bias: Tensor[B, N, C] -> Tensor[B, N, C]."""

    def __init__(self, dim: int, num_heads: int, res: int, fused_attn: bool = False) -> None:
        super().__init__()
        self.num_heads = num_heads
        self.key_dim = dim // num_heads
        self.scale = self.key_dim**-0.5
        self.norm = nn.LayerNorm(dim)
        self.qkv = nn.Linear(dim, 3 * dim)
        self.proj = nn.Linear(dim, dim)
        self.attention_biases = nn.Parameter(torch.zeros(num_heads, res * res))
        self.register_buffer("attention_bias_idxs", offset_index(res), persistent=False)
        self.fused_attn = bool(fused_attn)

    def forward(self, x: Tensor) -> Tensor:
        b, n, _ = x.shape
        qkv = self.qkv(self.norm(x)).view(b, n, self.num_heads, -1)
        q, k, v = (t.transpose(1, 2) for t in qkv.split([self.key_dim] * 3, dim=3))  # (B, H, N, d)
        bias = self.attention_biases[:, self.attention_bias_idxs].unsqueeze(0).to(q.dtype)  # (1, H, N, N)
        if use_sdpa(self.fused_attn):
            out = F.scaled_dot_product_attention(q, k, v, attn_mask=bias, scale=self.scale)
        else:
            out = attention_equation(q, k, v, scale=self.scale, bias=bias)
        return self.proj(out.transpose(1, 2).reshape(b, n, -1))


class NormMlp(nn.Module):
    def __init__(self, dim: int, hidden: int) -> None:
        super().__init__()
        self.norm = nn.LayerNorm(dim)
        self.fc1 = nn.Linear(dim, hidden)
        self.fc2 = nn.Linear(hidden, dim)
        self.act = nn.GELU()

    def forward(self, x: Tensor) -> Tensor:
        return self.fc2(self.act(self.fc1(self.norm(x))))


class TinyViTBlock(nn.Module):
    """Window attention, depthwise 3x3 ConvBN, MLP: Tensor[B, H, W, C] -> Tensor[B, H, W, C]."""

    def __init__(self, dim: int, num_heads: int, window: int, mlp_ratio: float = 4.0) -> None:
        super().__init__()
        self.window = window
        self.attn = WindowAttention(dim, num_heads, window)
        self.local_conv = ConvBN(dim, dim, 3, 1, 1, groups=dim)
        self.mlp = NormMlp(dim, int(dim * mlp_ratio))

    def forward(self, x: Tensor) -> Tensor:
        b, h, w, c = x.shape
        s = self.window
        if h == s and w == s:
            y = self.attn(x.reshape(b, h * w, c)).view(b, h, w, c)
        else:
            ph, pw = (s - h % s) % s, (s - w % s) % s
            y = F.pad(x, (0, 0, 0, pw, 0, ph)) if ph or pw else x
            hp, wp = h + ph, w + pw
            y = y.view(b, hp // s, s, wp // s, s, c).transpose(2, 3).reshape(-1, s * s, c)
            y = self.attn(y)
            y = y.view(b, hp // s, wp // s, s, s, c).transpose(2, 3).reshape(b, hp, wp, c)[:, :h, :w]
        x = x + y
        x = self.local_conv(x.permute(0, 3, 1, 2)).permute(0, 2, 3, 1)
        return x + self.mlp(x)


class Stage(nn.Module):
    """Blocks (MBConv for the first stage, TinyViT blocks after) then an optional patch merging;
    Tensor[B, C, H, W] in and out."""

    def __init__(self, blocks: list[nn.Module], downsample: nn.Module | None, *, conv: bool) -> None:
        super().__init__()
        self.blocks = nn.ModuleList(blocks)
        self.downsample = downsample
        self.conv = conv

    def forward(self, x: Tensor) -> Tensor:
        if not self.conv:
            x = x.permute(0, 2, 3, 1)
        for blk in self.blocks:
            x = blk(x)
        if not self.conv:
            x = x.permute(0, 3, 1, 2)
        return self.downsample(x) if self.downsample is not None else x


class TinyViTImageEncoder(nn.Module):
    """MobileSAM's TinyViT image encoder (module docstring)."""

    def __init__(self, *, dims: tuple[int, ...] = (64, 128, 160, 320), depths: tuple[int, ...] = (2, 2, 6, 2),
                 heads: tuple[int, ...] = (2, 4, 5, 10), windows: tuple[int, ...] = (7, 7, 14, 7),
                 out_chans: int = 256, mlp_ratio: float = 4.0, mbconv_expand: float = 4.0,
                 last_merge_stride: int = 1) -> None:
        super().__init__()
        self.patch_embed = PatchEmbed(dims[0])
        layers = []
        for i, depth in enumerate(depths):
            last = i == len(depths) - 1
            out = dims[min(i + 1, len(dims) - 1)]
            # MobileSAM keeps the last merge at stride 1 (stride 16 overall); TinyViT's own is 2
            down = None if last else PatchMerging(dims[i], out, stride=last_merge_stride if i == len(depths) - 2 else 2)
            if i == 0:
                blocks: list[nn.Module] = [MBConv(dims[0], mbconv_expand) for _ in range(depth)]
            else:
                blocks = [TinyViTBlock(dims[i], heads[i], windows[i], mlp_ratio) for _ in range(depth)]
            layers.append(Stage(blocks, down, conv=i == 0))
        self.layers = nn.ModuleList(layers)
        self.neck = nn.Sequential(nn.Conv2d(dims[-1], out_chans, 1, bias=False), LayerNorm2d(out_chans),
                                  nn.Conv2d(out_chans, out_chans, 3, padding=1, bias=False), LayerNorm2d(out_chans))

    def trunk(self, x: Tensor) -> Tensor:
        """The TinyViT stages without the neck: Tensor[B, dims[-1], H/16, W/16]."""
        x = self.patch_embed(x)
        for layer in self.layers:
            x = layer(x)
        return x

    def forward(self, x: Tensor) -> Tensor:
        return self.neck(self.trunk(x))
