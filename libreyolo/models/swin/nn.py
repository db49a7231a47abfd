"""Swin Transformer (Liu et al., 2021) as a classification body: sizes t (Swin-T), s (Swin-S).

=====  =====  ==============  ===============  ======  =====  ==============================
size   width  depths          heads            window  patch  params @1000 (published)
=====  =====  ==============  ===============  ======  =====  ==============================
t      96     2, 2, 6, 2      3, 6, 12, 24     7       4      28.29 M (28.3 M)
s      96     2, 2, 18, 2     3, 6, 12, 24     7       4      49.61 M (49.6 M)
=====  =====  ==============  ===============  ======  =====  ==============================

Tensor[B, 3, H, W] (standardised; H and W multiples of 32) -> logits Tensor[B, nc]. Tokens stay
channels-last, (B, h, w, C), through the whole body:

1. patch embedding: a 4x4 convolution with stride 4, then LayerNorm -> (B, H/4, W/4, C);
2. four stages; stage i > 0 starts with patch merging (each 2x2 group of tokens concatenated to
   4C channels, LayerNorm, a bias-free linear map to 2C), then ``depth`` pre-norm blocks of
   window attention and MLP. Odd blocks shift the windows by half a window (cyclic roll) and mask
   attention between tokens that were not neighbours before the roll;
3. final LayerNorm, mean over all tokens, a linear head.

Window attention is :class:`libreyolo.layers.attention.Attention` with a learned relative-position
bias table (:class:`RelativePositionBias`, through the layer's ``rel_pos_bias`` hook) and the shift
mask passed as ``attn_bias``; so the fused-attention policy (SPEC K-9) governs it, with
``fused_attn`` off by default.

Input sizes: H and W must be multiples of 32 (the patch and three 2x merges), else a ConfigError.
A stage whose token grid is not a multiple of the window (7) is padded at the bottom/right up to
one, and the padded tokens are masked out as keys; a stage whose grid is no larger than the window
along an axis is not shifted along it (one window covers it). At 224 px (grids 56, 28, 14, 7) no
stage pads and the last one does not shift, which is timm's ``swin_*_window7_224`` exactly.
All of this is decided from static shapes: the forward has no data-dependent control flow.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch
import torch.nn.functional as F
from torch import Tensor, nn
from torchvision.ops import StochasticDepth

from ...errors import ConfigError
from ...layers.attention import Attention
from ...layers.classify import ImageClassifier
from ...layers.mlp import Mlp

LN_EPS = 1e-5  # nn.LayerNorm's default, as the reference
MASK = -100.0  # the additive logit of a masked key (the value the published weights were trained with)
STRIDE = 32


@dataclass(frozen=True)
class SwinSpec:
    """One size: patch-embedding width ``dim`` (doubled at each stage), blocks per stage
    ``depths``, heads per stage ``heads``, ``window`` (tokens per side), MLP ``mlp_ratio``, ``patch``
    px, and the stochastic-depth rate of the last block (linear from 0 over all blocks)."""

    dim: int = 96
    depths: tuple[int, ...] = (2, 2, 6, 2)
    heads: tuple[int, ...] = (3, 6, 12, 24)
    window: int = 7
    mlp_ratio: float = 4.0
    patch: int = 4
    drop_path: float = 0.2


SPECS: dict[str, SwinSpec] = {
    "t": SwinSpec(depths=(2, 2, 6, 2), drop_path=0.2),
    "s": SwinSpec(depths=(2, 2, 18, 2), drop_path=0.3),
}


def relative_position_index(window: int) -> Tensor:
    """Tensor[N, N] (long, N = window**2): for query token i and key token j of a window (row-major),
    the row of the (2w-1)**2 bias table that holds their offset (dy, dx), ``(dy + w - 1) * (2w - 1)
    + (dx + w - 1)``.

    Example:
        >>> idx = relative_position_index(2)
        >>> idx.tolist()[0]  # query (0, 0) against keys (0, 0), (0, 1), (1, 0), (1, 1)
        [4, 3, 1, 0]
    """
    ys, xs = torch.meshgrid(torch.arange(window), torch.arange(window), indexing="ij")
    ys, xs = ys.flatten(), xs.flatten()
    dy = ys[:, None] - ys[None, :] + window - 1
    dx = xs[:, None] - xs[None, :] + window - 1
    return dy * (2 * window - 1) + dx


class RelativePositionBias(nn.Module):
    """The learned bias of one attention layer: ``table`` ((2w-1)**2, heads) looked up by the
    relative offset of each query/key pair -> Tensor[heads, N, N] (``Attention``'s hook)."""

    def __init__(self, window: int, heads: int) -> None:
        super().__init__()
        self.heads = heads
        self.table = nn.Parameter(torch.zeros((2 * window - 1) ** 2, heads))
        self.register_buffer("index", relative_position_index(window), persistent=False)
        nn.init.trunc_normal_(self.table, std=0.02)

    def forward(self) -> Tensor:
        n = self.index.shape[0]
        return self.table[self.index.view(-1)].view(n, n, self.heads).permute(2, 0, 1)


def partition(x: Tensor, w: int) -> Tensor:
    """(B, h, w_, C) with h, w_ multiples of ``w`` -> windows (B * nW, w*w, C), row-major windows."""
    h, wd, c = int(x.shape[1]), int(x.shape[2]), int(x.shape[3])  # static; the batch stays symbolic
    x = x.view(-1, h // w, w, wd // w, w, c).permute(0, 1, 3, 2, 4, 5)
    return x.reshape(-1, w * w, c)


def unpartition(win: Tensor, w: int, h: int, wd: int) -> Tensor:
    """Inverse of :func:`partition`: (B * nW, w*w, C) -> (B, h, wd, C)."""
    c = int(win.shape[-1])
    x = win.view(-1, h // w, wd // w, w, w, c).permute(0, 1, 3, 2, 4, 5)
    return x.reshape(-1, h, wd, c)


def _regions(size: int, padded: int, window: int, shift: int, device: torch.device) -> Tensor:
    """Along one axis of the rolled, padded grid: the region id of each position (0..2, the bands
    a shifted window can straddle), or -1 where the position is padding."""
    r = torch.arange(padded, device=device)
    band = (r >= padded - window).long() + (r >= padded - shift).long() if shift else torch.zeros_like(r)
    return torch.where((r + shift) % padded >= size, torch.full_like(r, -1), band)


def window_mask(grid: tuple[int, int], padded: tuple[int, int], window: int, shift: tuple[int, int], *,
                device: torch.device, dtype: torch.dtype) -> Tensor | None:
    """The additive mask of one stage's windows: Tensor[nW, N, N] with 0 where query and key lie in
    the same region (adjacent before the cyclic roll, both real or both padding) and ``MASK``
    elsewhere; ``None`` when nothing is shifted or padded.

    Example:
        >>> m = window_mask((14, 14), (14, 14), 7, (3, 3), device=torch.device("cpu"), dtype=torch.float32)
        >>> # the first window is whole; the last straddles 4 regions (4x4, 4x3, 3x4, 3x3 tokens)
        >>> tuple(m.shape), int((m[0] != 0).sum()), int((m[3] == 0).sum()) == 16**2 + 2 * 12**2 + 9**2
        ((4, 49, 49), 0, True)
    """
    if not any(shift) and tuple(grid) == tuple(padded):
        return None
    rh = _regions(grid[0], padded[0], window, shift[0], device)
    rw = _regions(grid[1], padded[1], window, shift[1], device)
    ids = torch.where((rh[:, None] < 0) | (rw[None, :] < 0), torch.full_like(rh[:, None] * rw[None, :], -1),
                      rh[:, None] * 3 + rw[None, :])  # (Hp, Wp)
    ids = partition(ids.view(1, *padded, 1), window).squeeze(-1)  # (nW, N)
    same = ids[:, :, None] == ids[:, None, :]
    return torch.where(same, torch.zeros((), dtype=dtype, device=device),
                       torch.full((), MASK, dtype=dtype, device=device))


class SwinBlock(nn.Module):
    """``x + dp(window_attn(norm1(x)))`` then ``x + dp(mlp(norm2(x)))`` on (B, h, w, C) tokens; the
    stage passes the padding, the shift and the mask (:class:`SwinStage`)."""

    def __init__(self, dim: int, heads: int, window: int, mlp_ratio: float, *, drop_path: float,
                 fused_attn: bool) -> None:
        super().__init__()
        self.window = window
        self.norm1 = nn.LayerNorm(dim, eps=LN_EPS)
        self.attn = Attention(dim, num_heads=heads, qkv_bias=True, fused_attn=fused_attn,
                              rel_pos_bias=RelativePositionBias(window, heads))
        self.norm2 = nn.LayerNorm(dim, eps=LN_EPS)
        self.mlp = Mlp(dim, int(dim * mlp_ratio))
        self.drop_path = StochasticDepth(drop_path, "row") if drop_path > 0 else nn.Identity()

    def forward(self, x: Tensor, *, padded: tuple[int, int], shift: tuple[int, int], mask: Tensor | None) -> Tensor:
        h, w = int(x.shape[1]), int(x.shape[2])
        y = self.norm1(x)
        if (h, w) != tuple(padded):
            y = F.pad(y, (0, 0, 0, padded[1] - w, 0, padded[0] - h))
        if any(shift):
            y = torch.roll(y, shifts=(-shift[0], -shift[1]), dims=(1, 2))
        win = partition(y, self.window)
        bias = None
        if mask is not None:  # (nW, N, N) -> (B * nW, 1, N, N): the windows of each image in turn
            n = mask.shape[-1]
            bias = mask.unsqueeze(0).expand(x.shape[0], -1, -1, -1).reshape(-1, 1, n, n)
        y = unpartition(self.attn(win, attn_bias=bias), self.window, *padded)
        if any(shift):
            y = torch.roll(y, shifts=shift, dims=(1, 2))
        if (h, w) != tuple(padded):
            y = y[:, :h, :w]
        x = x + self.drop_path(y)
        return x + self.drop_path(self.mlp(self.norm2(x)))


class PatchMerging(nn.Module):
    """(B, h, w, C) -> (B, h/2, w/2, 2C): each 2x2 group concatenated in the order (0,0), (1,0),
    (0,1), (1,1) (row, column offsets), LayerNorm over 4C, a bias-free linear map to 2C."""

    def __init__(self, dim: int) -> None:
        super().__init__()
        self.norm = nn.LayerNorm(4 * dim, eps=LN_EPS)
        self.reduction = nn.Linear(4 * dim, 2 * dim, bias=False)

    def forward(self, x: Tensor) -> Tensor:
        h, w, c = int(x.shape[1]), int(x.shape[2]), int(x.shape[3])
        x = x.view(-1, h // 2, 2, w // 2, 2, c).permute(0, 1, 3, 4, 2, 5).reshape(-1, h // 2, w // 2, 4 * c)
        return self.reduction(self.norm(x))


class SwinStage(nn.Module):
    """Optional patch merging, then blocks alternating plain and shifted windows. The padding, shift
    and masks are worked out once per forward from the token grid (module docstring)."""

    def __init__(self, dim: int, depth: int, heads: int, window: int, mlp_ratio: float, *, merge: bool,
                 drop_paths: list[float], fused_attn: bool) -> None:
        super().__init__()
        self.window = window
        self.downsample = PatchMerging(dim // 2) if merge else nn.Identity()
        self.blocks = nn.ModuleList(SwinBlock(dim, heads, window, mlp_ratio, drop_path=r, fused_attn=fused_attn)
                                    for r in drop_paths)

    def forward(self, x: Tensor) -> Tensor:
        x = self.downsample(x)
        grid = (int(x.shape[1]), int(x.shape[2]))
        w = self.window
        padded = (-(-grid[0] // w) * w, -(-grid[1] // w) * w)
        shift = tuple(w // 2 if g > w else 0 for g in grid)
        kw = {"device": x.device, "dtype": x.dtype}
        masks = (window_mask(grid, padded, w, (0, 0), **kw), window_mask(grid, padded, w, shift, **kw))
        for i, block in enumerate(self.blocks):
            s = shift if i % 2 else (0, 0)
            x = block(x, padded=padded, shift=s, mask=masks[i % 2])
        return x


class PatchEmbed(nn.Module):
    """``patch x patch`` strided convolution and LayerNorm: (B, 3, H, W) -> (B, H/p, W/p, D)."""

    def __init__(self, dim: int, patch: int) -> None:
        super().__init__()
        self.proj = nn.Conv2d(3, dim, kernel_size=patch, stride=patch)
        self.norm = nn.LayerNorm(dim, eps=LN_EPS)

    def forward(self, x: Tensor) -> Tensor:
        return self.norm(self.proj(x).permute(0, 2, 3, 1))


class SwinTransformer(nn.Module):
    """The Swin classification body (module docstring); input already standardised.

    Example:
        >>> spec = SwinSpec(dim=16, depths=(2, 2, 2, 2), heads=(1, 2, 4, 8))
        >>> net = SwinTransformer(spec, nc=5).eval()
        >>> tuple(net(torch.rand(2, 3, 64, 96)).shape)
        (2, 5)
    """

    def __init__(self, spec: SwinSpec, *, nc: int, fused_attn: bool = False) -> None:
        super().__init__()
        if len(spec.depths) != len(spec.heads):
            raise ConfigError(f"Swin depths {spec.depths} and heads {spec.heads} need one entry per stage")
        self.spec = spec
        self.stride = spec.patch * 2 ** (len(spec.depths) - 1)
        self.patch_embed = PatchEmbed(spec.dim, spec.patch)
        total = sum(spec.depths)
        rates = [spec.drop_path * i / max(total - 1, 1) for i in range(total)]  # linear from 0
        stages, first = [], 0
        for i, (depth, heads) in enumerate(zip(spec.depths, spec.heads, strict=True)):
            stages.append(SwinStage(spec.dim * 2**i, depth, heads, spec.window, spec.mlp_ratio, merge=i > 0,
                                    drop_paths=rates[first:first + depth], fused_attn=fused_attn))
            first += depth
        self.layers = nn.Sequential(*stages)
        self.width = spec.dim * 2 ** (len(spec.depths) - 1)
        self.norm = nn.LayerNorm(self.width, eps=LN_EPS)
        self.head = nn.Linear(self.width, nc)
        self._init_weights()

    def _init_weights(self) -> None:
        # truncated normal (std 0.02) linear weights, zero biases; converted weights replace them
        for m in self.modules():
            if isinstance(m, nn.Linear):
                nn.init.trunc_normal_(m.weight, std=0.02)
                if m.bias is not None:
                    nn.init.zeros_(m.bias)

    def check_input(self, x: Tensor) -> None:
        """Raise a one-line ConfigError unless H and W are multiples of the stride (32)."""
        h, w = int(x.shape[-2]), int(x.shape[-1])
        if h % self.stride or w % self.stride:
            near = [max(self.stride, round(v / self.stride) * self.stride) for v in (h, w)]
            raise ConfigError(f"Swin needs an input height and width that are multiples of {self.stride}, got "
                              f"{h}x{w}; use e.g. {near[0]}x{near[1]} (imgsz a multiple of {self.stride}; 224 is "
                              "the trained size)")

    def stages(self, x: Tensor) -> list[Tensor]:
        """Standardised images -> the four stage outputs (B, H/4/2**i, W/4/2**i, C*2**i), channels
        last, before the final norm (the feature pyramid when Swin serves as a backbone)."""
        self.check_input(x)
        outs, t = [], self.patch_embed(x)
        for stage in self.layers:
            t = stage(t)
            outs.append(t)
        return outs

    def forward(self, x: Tensor) -> Tensor:
        t = self.norm(self.stages(x)[-1])
        return self.head(t.mean(dim=(1, 2)))


def build_swin_classifier(spec: SwinSpec, *, nc: int, fused_attn: bool = False) -> ImageClassifier:
    """[0, 1] RGB -> logits: ImageNet standardisation in front of :class:`SwinTransformer`.

    Example:
        >>> net = build_swin_classifier(SwinSpec(dim=8, depths=(1, 1, 1, 1), heads=(1, 1, 2, 2)), nc=3)
        >>> tuple(net(torch.rand(1, 3, 32, 32)).shape)
        (1, 3)
    """
    return ImageClassifier(SwinTransformer(spec, nc=nc, fused_attn=fused_attn))
