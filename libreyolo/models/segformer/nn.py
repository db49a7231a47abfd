"""SegFormer (Xie et al., 2021): the Mix Transformer encoder and the all-MLP decode head.

============  =====================  ==========  =====================================
size          widths                 depths      params @150 classes (published, ADE20K)
============  =====================  ==========  =====================================
b0            32, 64, 160, 256       2, 2, 2, 2  3.75 M (3.8 M)
b1            64, 128, 320, 512      2, 2, 2, 2  13.72 M (13.7 M)
============  =====================  ==========  =====================================

Every size: heads 1, 2, 5, 8; key/value spatial reduction 8, 4, 2, 1; Mix-FFN ratio 4; decoder
width 256; stochastic depth 0.1 over the blocks (training only).

- **Overlapping patch embedding**: a strided convolution (7x7 stride 4 for the first stage, 3x3
  stride 2 after), padding ``k // 2``, then LayerNorm: neighbouring patches share pixels.
- **Efficient self-attention**: queries from every token; keys and values from the tokens
  reduced by a ``sr x sr`` stride-``sr`` convolution and LayerNorm, so the cost is ``N^2 / sr^2``.
  The product runs as :func:`~libreyolo.layers.attention.attention_equation`, or as SDPA when
  the module's ``fused_attn`` flag is on and :func:`~libreyolo.kernels.attention.use_sdpa` allows
  (SPEC K-9; off by default until a byte-exact parity run).
- **Mix-FFN**: Linear, 3x3 depthwise convolution on the token grid (the positional cue, in place
  of position embeddings), GELU, Linear.
- **Decode head**: each stage's tokens projected to 256 by a Linear, upsampled bilinearly to the
  first stage's 1/4 grid, concatenated (deepest first), fused by a 1x1 convolution + BatchNorm
  + ReLU, dropout 0.1, 1x1 classifier.

Contract: Tensor[B, 3, H, W] float RGB in [0, 1] (H, W multiples of 32; standardised here with
the ImageNet mean / std) -> logits Tensor[B, nc, H / 4, W / 4], in train and eval mode.
"""

from __future__ import annotations

import torch
import torch.nn.functional as F
from torch import Tensor, nn
from torchvision.ops import StochasticDepth

from ...errors import ConfigError
from ...kernels.attention import use_sdpa
from ...layers.attention import attention_equation
from ...layers.classify import IMAGENET_MEAN, IMAGENET_STD
from ...layers.conv import fuse_conv_bn

# size -> (widths, depths)
SPECS: dict[str, tuple[tuple[int, ...], tuple[int, ...]]] = {
    "b0": ((32, 64, 160, 256), (2, 2, 2, 2)),
    "b1": ((64, 128, 320, 512), (2, 2, 2, 2)),
}
HEADS = (1, 2, 5, 8)
SR_RATIOS = (8, 4, 2, 1)
PATCH = ((7, 4), (3, 2), (3, 2), (3, 2))  # (kernel, stride) per stage
MLP_RATIO = 4
DECODER_WIDTH = 256
DROP_PATH = 0.1
LN_EPS = 1e-5
# SPEC K-9: SDPA becomes the default (True) only after a byte-exact parity run on the GPU
# (tests/gpu/test_segformer_gpu.py::test_fused_attention_byte_exact_report); until then the equation.
FUSED_ATTN_DEFAULT = False


class OverlapPatchEmbed(nn.Module):
    """x (Tensor[B, c1, H, W]) -> (tokens Tensor[B, h * w, c2], h, w) with ``h = ceil(H / s)``."""

    def __init__(self, c1: int, c2: int, k: int, s: int) -> None:
        super().__init__()
        self.conv = nn.Conv2d(c1, c2, k, s, k // 2)
        self.norm = nn.LayerNorm(c2, eps=LN_EPS)

    def forward(self, x: Tensor) -> tuple[Tensor, int, int]:
        x = self.conv(x)
        h, w = x.shape[2], x.shape[3]
        return self.norm(x.flatten(2).transpose(1, 2)), h, w


class EfficientSelfAttention(nn.Module):
    """Multi-head attention whose keys and values come from a spatially reduced token grid.

    forward(x, h, w): x (Tensor[B, h * w, D]) -> Tensor[B, h * w, D].

    Example:
        >>> m = EfficientSelfAttention(32, heads=2, sr=4)
        >>> tuple(m(torch.rand(1, 64, 32), 8, 8).shape)
        (1, 64, 32)
    """

    def __init__(self, dim: int, *, heads: int, sr: int, fused_attn: bool = False) -> None:
        super().__init__()
        if dim % heads:
            raise ConfigError(f"EfficientSelfAttention dim={dim} is not divisible by heads={heads}")
        self.heads, self.head_dim, self.sr_ratio = heads, dim // heads, sr
        self.scale = self.head_dim ** -0.5
        self.fused_attn = bool(fused_attn)
        self.q, self.k, self.v = nn.Linear(dim, dim), nn.Linear(dim, dim), nn.Linear(dim, dim)
        self.proj = nn.Linear(dim, dim)
        if sr > 1:
            self.sr = nn.Conv2d(dim, dim, sr, sr)
            self.sr_norm = nn.LayerNorm(dim, eps=LN_EPS)

    def forward(self, x: Tensor, h: int, w: int) -> Tensor:
        b, n, d = x.shape
        q = self.q(x).view(b, n, self.heads, self.head_dim).transpose(1, 2)
        kv = x
        if self.sr_ratio > 1:
            kv = self.sr(x.transpose(1, 2).reshape(b, d, h, w)).flatten(2).transpose(1, 2)
            kv = self.sr_norm(kv)
        k = self.k(kv).view(b, -1, self.heads, self.head_dim).transpose(1, 2)
        v = self.v(kv).view(b, -1, self.heads, self.head_dim).transpose(1, 2)
        if use_sdpa(self.fused_attn):
            out = F.scaled_dot_product_attention(q, k, v, scale=self.scale)
        else:
            out = attention_equation(q, k, v, scale=self.scale)
        return self.proj(out.transpose(1, 2).reshape(b, n, d))


class MixFFN(nn.Module):
    """Linear -> 3x3 depthwise conv on the (h, w) grid -> GELU -> Linear, on Tensor[B, h * w, D]."""

    def __init__(self, dim: int, hidden: int) -> None:
        super().__init__()
        self.fc1 = nn.Linear(dim, hidden)
        self.dw = nn.Conv2d(hidden, hidden, 3, 1, 1, groups=hidden)
        self.act = nn.GELU()
        self.fc2 = nn.Linear(hidden, dim)

    def forward(self, x: Tensor, h: int, w: int) -> Tensor:
        x = self.fc1(x)
        b, n, c = x.shape
        x = self.dw(x.transpose(1, 2).reshape(b, c, h, w)).flatten(2).transpose(1, 2)
        return self.fc2(self.act(x))


class MiTBlock(nn.Module):
    """Pre-norm transformer block: ``x + drop(attn(norm1(x)))``, then ``x + drop(ffn(norm2(x)))``."""

    def __init__(self, dim: int, *, heads: int, sr: int, drop_path: float) -> None:
        super().__init__()
        self.norm1 = nn.LayerNorm(dim, eps=LN_EPS)
        self.attn = EfficientSelfAttention(dim, heads=heads, sr=sr, fused_attn=FUSED_ATTN_DEFAULT)
        self.drop = StochasticDepth(drop_path, "row") if drop_path > 0 else nn.Identity()
        self.norm2 = nn.LayerNorm(dim, eps=LN_EPS)
        self.ffn = MixFFN(dim, dim * MLP_RATIO)

    def forward(self, x: Tensor, h: int, w: int) -> Tensor:
        x = x + self.drop(self.attn(self.norm1(x), h, w))
        return x + self.drop(self.ffn(self.norm2(x), h, w))


class MiTStage(nn.Module):
    """Patch embedding, blocks, LayerNorm: Tensor[B, c1, H, W] -> Tensor[B, c2, H / s, W / s]."""

    def __init__(self, c1: int, c2: int, *, k: int, s: int, depth: int, heads: int, sr: int,
                 drop_paths: list[float]) -> None:
        super().__init__()
        self.embed = OverlapPatchEmbed(c1, c2, k, s)
        self.blocks = nn.ModuleList(MiTBlock(c2, heads=heads, sr=sr, drop_path=dp) for dp in drop_paths[:depth])
        self.norm = nn.LayerNorm(c2, eps=LN_EPS)

    def forward(self, x: Tensor) -> Tensor:
        t, h, w = self.embed(x)
        for blk in self.blocks:
            t = blk(t, h, w)
        t = self.norm(t)
        return t.transpose(1, 2).reshape(t.shape[0], -1, h, w)


class MixTransformer(nn.Module):
    """The MiT encoder: Tensor[B, 3, H, W] (standardised) -> four maps at strides 4, 8, 16, 32."""

    def __init__(self, widths: tuple[int, ...], depths: tuple[int, ...], *, drop_path: float = DROP_PATH) -> None:
        super().__init__()
        rates = torch.linspace(0, drop_path, sum(depths)).tolist()
        stages, c1, at = [], 3, 0
        for i, (c2, depth) in enumerate(zip(widths, depths, strict=True)):
            k, s = PATCH[i]
            stages.append(MiTStage(c1, c2, k=k, s=s, depth=depth, heads=HEADS[i], sr=SR_RATIOS[i],
                                   drop_paths=rates[at:at + depth]))
            c1, at = c2, at + depth
        self.stages = nn.ModuleList(stages)

    def forward(self, x: Tensor) -> list[Tensor]:
        feats = []
        for stage in self.stages:
            x = stage(x)
            feats.append(x)
        return feats


class MLPDecodeHead(nn.Module):
    """The all-MLP decoder: four maps -> logits Tensor[B, nc, H / 4, W / 4] (module docstring)."""

    def __init__(self, widths: tuple[int, ...], nc: int, *, width: int = DECODER_WIDTH, dropout: float = 0.1) -> None:
        super().__init__()
        self.proj = nn.ModuleList(nn.Linear(c, width) for c in widths)
        self.fuse = nn.Conv2d(width * len(widths), width, 1, bias=False)
        self.bn: nn.Module = nn.BatchNorm2d(width)
        self.act = nn.ReLU()
        self.dropout = nn.Dropout(dropout)
        self.cls = nn.Conv2d(width, nc, 1)

    def forward(self, feats: list[Tensor]) -> Tensor:
        size = feats[0].shape[2:]
        outs = []
        for f, proj in zip(feats, self.proj, strict=True):
            b, _, h, w = f.shape
            y = proj(f.flatten(2).transpose(1, 2)).transpose(1, 2).reshape(b, -1, h, w)
            if y.shape[2:] != size:
                y = F.interpolate(y, size=size, mode="bilinear", align_corners=False)
            outs.append(y)
        x = self.act(self.bn(self.fuse(torch.cat(outs[::-1], dim=1))))
        return self.cls(self.dropout(x))


class SegFormerNet(nn.Module):
    """``head(encoder(standardise(x)))``: Tensor[B, 3, H, W] in [0, 1] -> logits Tensor[B, nc, H/4, W/4].

    Example:
        >>> net = build_segformer(size="b0", nc=3).eval()
        >>> tuple(net(torch.rand(1, 3, 64, 96)).shape)
        (1, 3, 16, 24)
    """

    def __init__(self, widths: tuple[int, ...], depths: tuple[int, ...], nc: int) -> None:
        super().__init__()
        self.encoder = MixTransformer(widths, depths)
        self.head = MLPDecodeHead(widths, nc)
        self.register_buffer("mean", torch.tensor(IMAGENET_MEAN).view(1, 3, 1, 1), persistent=False)
        self.register_buffer("std", torch.tensor(IMAGENET_STD).view(1, 3, 1, 1), persistent=False)

    def forward(self, x: Tensor) -> Tensor:
        x = (x - self.mean.to(x.dtype)) / self.std.to(x.dtype)
        return self.head(self.encoder(x))

    def fuse(self) -> None:
        """Fold the decode head's BatchNorm into its 1x1 fuse convolution (inference only)."""
        if isinstance(self.head.bn, nn.BatchNorm2d):
            self.head.fuse = fuse_conv_bn(self.head.fuse, self.head.bn)
            self.head.bn = nn.Identity()


def build_segformer(*, size: str, nc: int) -> SegFormerNet:
    """A SegFormer of ``size`` (b0, b1) with ``nc`` classes, randomly initialised (truncated-normal
    Linear weights std 0.02, LayerNorm 1 / 0, convolutions He-normal by fan-out, the classifier
    normal with std 0.01 so that the first logits are small)."""
    if size not in SPECS:
        raise ConfigError(f"unknown SegFormer size {size!r}; sizes: {', '.join(SPECS)}")
    widths, depths = SPECS[size]
    net = SegFormerNet(widths, depths, nc)
    for m in net.modules():
        if isinstance(m, nn.Linear):
            nn.init.trunc_normal_(m.weight, std=0.02)
            nn.init.zeros_(m.bias)
        elif isinstance(m, nn.Conv2d):
            fan_out = m.kernel_size[0] * m.kernel_size[1] * m.out_channels // m.groups
            nn.init.normal_(m.weight, std=(2.0 / fan_out) ** 0.5)
            if m.bias is not None:
                nn.init.zeros_(m.bias)
    nn.init.normal_(net.head.cls.weight, std=0.01)
    return net
