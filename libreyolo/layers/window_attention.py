"""Shifted-window self-attention (Swin, Liu et al. 2021), shared by the Swin classifier, SwinIR and
BiRefNet's Swin backbone (with the patch embedding and patch merging of the hierarchical Swin).

Tokens are channels-last, ``(B, h, w, C)``. A :class:`SwinBlock` is a pre-norm transformer block
whose attention runs inside non-overlapping ``window x window`` windows; every other block rolls
the grid by half a window first (cyclic shift) and masks attention between tokens that were not
neighbours before the roll (:func:`window_mask`). The attention itself is the one shared layer
:class:`libreyolo.layers.attention.Attention` with a learned relative-position bias
(:class:`RelativePositionBias`, through its ``rel_pos_bias`` hook) and the mask as ``attn_bias``,
so the fused-attention policy (SPEC K-9) governs it.

Two ways to call a block (and :func:`window_mask`, :func:`partition`, :func:`unpartition`):

- ``padded=(Hp, Wp)`` (the Swin classifier): sizes are read as Python ints (static under tracing,
  the batch stays symbolic); a grid that is not a multiple of the window is padded at the
  bottom/right and the padded tokens are masked out as keys;
- ``padded=None`` (SwinIR, which pads the image instead): the grid must already be a multiple of
  the window, and sizes are read from the tensor shapes without ``int()``, so a traced export
  (ONNX) keeps the height and width dynamic; the mask is built from the same shapes.
"""

from __future__ import annotations

import torch
import torch.nn.functional as F
from torch import Tensor, nn
from torchvision.ops import StochasticDepth

from .attention import Attention
from .mlp import Mlp

LN_EPS = 1e-5  # nn.LayerNorm's default, as the references
MASK = -100.0  # the additive logit of a masked key (the value the published weights were trained with)


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

    NO_WEIGHT_DECAY = ("table",)  # exempt from weight decay (training.optim.param_groups)

    def __init__(self, window: int, heads: int) -> None:
        super().__init__()
        self.heads = heads
        self.table = nn.Parameter(torch.zeros((2 * window - 1) ** 2, heads))
        self.register_buffer("index", relative_position_index(window), persistent=False)
        nn.init.trunc_normal_(self.table, std=0.02)

    def forward(self) -> Tensor:
        n = self.index.shape[0]
        return self.table[self.index.view(-1)].view(n, n, self.heads).permute(2, 0, 1)


def _sizes(x: Tensor, symbolic: bool) -> tuple:
    """(h, w, C) of a (B, h, w, C) tensor: ints, or the shape entries as they are (traced sizes stay
    symbolic under ``torch.jit.trace``)."""
    if symbolic:
        return x.shape[1], x.shape[2], x.shape[3]
    return int(x.shape[1]), int(x.shape[2]), int(x.shape[3])


def partition(x: Tensor, w: int, *, symbolic: bool = False) -> Tensor:
    """(B, h, w_, C) with h, w_ multiples of ``w`` -> windows (B * nW, w*w, C), row-major windows."""
    h, wd, c = _sizes(x, symbolic)
    x = x.view(-1, h // w, w, wd // w, w, c).permute(0, 1, 3, 2, 4, 5)
    return x.reshape(-1, w * w, c)


def unpartition(win: Tensor, w: int, h: int, wd: int, *, symbolic: bool = False) -> Tensor:
    """Inverse of :func:`partition`: (B * nW, w*w, C) -> (B, h, wd, C)."""
    c = win.shape[-1] if symbolic else int(win.shape[-1])
    x = win.view(-1, h // w, wd // w, w, w, c).permute(0, 1, 3, 2, 4, 5)
    return x.reshape(-1, h, wd, c)


def _regions(size: int, padded: int | None, window: int, shift: int, device: torch.device) -> Tensor:
    """Along one axis of the rolled (and padded) grid: the region id of each position (0..2, the
    bands a shifted window can straddle), or -1 where the position is padding (``padded=None``:
    no padding, ``size`` a multiple of the window, possibly a traced size)."""
    n = size if padded is None else padded
    r = torch.arange(n, device=device)
    band = (r >= n - window).long() + (r >= n - shift).long() if shift else torch.zeros_like(r)
    if padded is None:
        return band
    return torch.where((r + shift) % padded >= size, torch.full_like(r, -1), band)


def window_mask(grid: tuple[int, int], padded: tuple[int, int] | None, window: int, shift: tuple[int, int], *,
                device: torch.device, dtype: torch.dtype) -> Tensor | None:
    """The additive mask of one stage's windows: Tensor[nW, N, N] with 0 where query and key lie in
    the same region (adjacent before the cyclic roll, both real or both padding) and ``MASK``
    elsewhere; ``None`` when nothing is shifted or padded. ``padded=None``: the grid is already a
    multiple of the window (module docstring).

    Example:
        >>> m = window_mask((14, 14), (14, 14), 7, (3, 3), device=torch.device("cpu"), dtype=torch.float32)
        >>> # the first window is whole; the last straddles 4 regions (4x4, 4x3, 3x4, 3x3 tokens)
        >>> tuple(m.shape), int((m[0] != 0).sum()), int((m[3] == 0).sum()) == 16**2 + 2 * 12**2 + 9**2
        ((4, 49, 49), 0, True)
        >>> torch.equal(m, window_mask((14, 14), None, 7, (3, 3), device=m.device, dtype=m.dtype))
        True
    """
    if padded is None:
        if not any(shift):
            return None
        rh = _regions(grid[0], None, window, shift[0], device)
        rw = _regions(grid[1], None, window, shift[1], device)
        ids = (rh[:, None] * 3 + rw[None, :])[None, :, :, None]  # (1, H, W, 1)
        ids = partition(ids, window, symbolic=True).squeeze(-1)  # (nW, N)
    else:
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
    caller passes the padding (``None``: none, sizes symbolic), the shift and the mask.

    Example:
        >>> blk = SwinBlock(8, 2, 4, 2.0, drop_path=0.0, fused_attn=False).eval()
        >>> x = torch.rand(1, 8, 12, 8)
        >>> m = window_mask((8, 12), None, 4, (2, 2), device=x.device, dtype=x.dtype)
        >>> tuple(blk(x, padded=None, shift=(2, 2), mask=m).shape)
        (1, 8, 12, 8)
    """

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

    def forward(self, x: Tensor, *, padded: tuple[int, int] | None, shift: tuple[int, int],
                mask: Tensor | None) -> Tensor:
        symbolic = padded is None
        if symbolic:
            h, w = x.shape[1], x.shape[2]
            grid = (h, w)
            pad = False
        else:
            h, w = int(x.shape[1]), int(x.shape[2])
            grid = tuple(padded)
            pad = (h, w) != grid
        y = self.norm1(x)
        if pad:
            y = F.pad(y, (0, 0, 0, grid[1] - w, 0, grid[0] - h))
        if any(shift):
            y = torch.roll(y, shifts=(-shift[0], -shift[1]), dims=(1, 2))
        win = partition(y, self.window, symbolic=symbolic)
        bias = None
        if mask is not None:  # (nW, N, N) -> (B * nW, 1, N, N): the windows of each image in turn
            n = mask.shape[-1]
            bias = mask.unsqueeze(0).expand(x.shape[0], -1, -1, -1).reshape(-1, 1, n, n)
        y = unpartition(self.attn(win, attn_bias=bias), self.window, *grid, symbolic=symbolic)
        if any(shift):
            y = torch.roll(y, shifts=shift, dims=(1, 2))
        if pad:
            y = y[:, :h, :w]
        x = x + self.drop_path(y)
        return x + self.drop_path(self.mlp(self.norm2(x)))


class PatchMerging(nn.Module):
    """(B, h, w, C) -> (B, ceil(h/2), ceil(w/2), 2C): each 2x2 group concatenated in the order (0,0),
    (1,0), (0,1), (1,1) (row, column offsets), LayerNorm over 4C, a bias-free linear map to 2C. An
    odd side is zero-padded at the bottom/right first (the hierarchical Swin backbone's rule)."""

    def __init__(self, dim: int) -> None:
        super().__init__()
        self.norm = nn.LayerNorm(4 * dim, eps=LN_EPS)
        self.reduction = nn.Linear(4 * dim, 2 * dim, bias=False)

    def forward(self, x: Tensor) -> Tensor:
        h, w, c = int(x.shape[1]), int(x.shape[2]), int(x.shape[3])
        if h % 2 or w % 2:
            x = F.pad(x, (0, 0, 0, w % 2, 0, h % 2))
            h, w = h + h % 2, w + w % 2
        x = x.view(-1, h // 2, 2, w // 2, 2, c).permute(0, 1, 3, 4, 2, 5).reshape(-1, h // 2, w // 2, 4 * c)
        return self.reduction(self.norm(x))


class PatchEmbed(nn.Module):
    """``patch x patch`` strided convolution and LayerNorm: (B, 3, H, W) -> (B, H/p, W/p, D)."""

    def __init__(self, dim: int, patch: int) -> None:
        super().__init__()
        self.proj = nn.Conv2d(3, dim, kernel_size=patch, stride=patch)
        self.norm = nn.LayerNorm(dim, eps=LN_EPS)

    def forward(self, x: Tensor) -> Tensor:
        return self.norm(self.proj(x).permute(0, 2, 3, 1))
