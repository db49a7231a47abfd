"""A plain ViT with interleaved window / global attention and window-major token order, the
backbone of LW-DETR (ViT, after ViTDet) and RF-DETR (DINOv2 with windowed attention).

The token grid ``gh x gw`` is split once, after the patch embedding, into ``n x n`` windows that
are stacked in the batch dimension (``B * n**2`` sequences of ``gh/n * gw/n`` tokens, a class token
first in each when the backbone has one). A *window* block attends within its sequence; a *global*
block folds the windows of an image into one sequence for the attention only (the order of the
tokens does not matter to attention without relative positions) and unfolds after it. The MLPs run
per token. Selected block outputs are unfolded back to ``(B, D, gh, gw)`` maps (after the final
LayerNorm where the backbone has one, the class tokens dropped).

Differences of the two backbones, as flags: LW-DETR has no class token, a LayerScale of 0.1, no
output norm and a plain bicubic resampling of its 14 x 14 position embedding; RF-DETR (DINOv2) has a
class token (its position added, then copied into each window), a LayerScale of 1.0, the final
LayerNorm on each selected output and an antialiased bicubic resampling (``pos_antialias``), and
its window split reads the grid as DINOv2-windowed does (``(n, gw/n, n, gh/n)``, the same split as
the plain one for square grids). Attention is :class:`~libreyolo.layers.attention.Attention` with
its ``fused_attn`` flag (SPEC K-9).
"""

from __future__ import annotations

from collections.abc import Sequence

import torch
import torch.nn.functional as F
from torch import Tensor, nn

from ...errors import ConfigError
from ...layers.classify import IMAGENET_MEAN, IMAGENET_STD
from ...layers.init import trunc_normal_linears
from .net import LN_EPS, Block, PatchEmbed

_AA: dict[tuple[int, int, str], Tensor] = {}


def antialias_matrix(n_in: int, n_out: int, device: torch.device) -> Tensor:
    """The (n_out, n_in) float32 weights of PyTorch's antialiased bicubic resampling along one axis
    (``align_corners=False``), read off by resampling the unit vectors once on the CPU and kept per
    device: a constant of the graph under tracing, ONNX export and CUDA-graph capture (where the
    ``_upsample_bicubic2d_aa`` operator itself has no ONNX form)."""
    key = (n_in, n_out, str(device))
    if key not in _AA:
        # a normal tensor even when first asked for under inference_mode (a predict): the cache
        # outlives the call, and an inference tensor could never be saved for a later backward
        with torch.inference_mode(False), torch.no_grad():
            # a width of 4 kept at 4 (the identity; a width of 1 is a degenerate case of the kernel)
            eye = torch.eye(n_in, dtype=torch.float32).reshape(1, n_in, n_in, 1).expand(1, n_in, n_in, 4)
            cols = F.interpolate(eye.contiguous(), size=(n_out, 4), mode="bicubic", align_corners=False, antialias=True)
            _AA[key] = cols[0, :, :, 0].t().contiguous().clone().to(device)
    return _AA[key]


class WindowedBlock(Block):
    """:class:`~libreyolo.models._vit.net.Block` whose attention is global over the ``windows``
    windows of an image (``window=False``) or within each window (``window=True``)."""

    def __init__(self, dim: int, heads: int, *, window: bool, windows: int, layer_scale: float, fused_attn: bool,
                 mlp_ratio: float = 4.0, drop_path: float = 0.0) -> None:
        super().__init__(dim, heads, mlp_ratio, drop_path=drop_path, fused_attn=fused_attn, layer_scale=layer_scale)
        self.window, self.windows = window, windows

    def forward(self, x: Tensor) -> Tensor:
        b, n, c = x.shape
        h = self.norm1(x)
        if not self.window:
            h = h.reshape(b // self.windows, self.windows * n, c)
        a = self.attn(h).reshape(b, n, c)
        x = x + self.drop_path(self.ls1(a))
        return x + self.drop_path(self.ls2(self.mlp(self.norm2(x))))


class WindowedViT(nn.Module):
    """[0, 1] RGB Tensor[B, 3, H, W] (sides multiples of ``patch * windows``) -> one map
    Tensor[B, dim, H/patch, W/patch] per ``out_blocks`` entry (0-indexed blocks; module docs).

    Example:
        >>> vit = WindowedViT(dim=32, depth=3, heads=2, patch=16, pos_grid=4, windows=2, window_blocks=(0, 2),
        ...                   out_blocks=(1, 2), cls_token=True, layer_scale=1.0, out_norm=True, pos_antialias=True)
        >>> [tuple(m.shape) for m in vit(torch.rand(1, 3, 64, 96))]
        [(1, 32, 4, 6), (1, 32, 4, 6)]
    """

    NO_WEIGHT_DECAY = ("cls_token", "pos_embed")  # exempt from weight decay (training.optim.param_groups)

    def __init__(self, *, dim: int, depth: int, heads: int, patch: int, pos_grid: int, windows: int,
                 window_blocks: Sequence[int], out_blocks: Sequence[int], cls_token: bool, layer_scale: float,
                 out_norm: bool, pos_antialias: bool, fused_attn: bool = False, mlp_ratio: float = 4.0) -> None:
        super().__init__()
        if max(out_blocks) >= depth:
            raise ConfigError(f"out_blocks {list(out_blocks)} exceed the depth {depth}")
        self.patch, self.windows, self.pos_grid = patch, windows, pos_grid
        self.out_blocks, self.pos_antialias = tuple(out_blocks), pos_antialias
        self.patch_embed = PatchEmbed(dim, patch)
        self.cls_token = nn.Parameter(torch.zeros(1, 1, dim)) if cls_token else None
        self.pos_embed = nn.Parameter(torch.zeros(1, 1 + pos_grid * pos_grid, dim))
        self.blocks = nn.ModuleList(
            WindowedBlock(dim, heads, window=i in set(window_blocks), windows=windows * windows,
                          layer_scale=layer_scale, fused_attn=fused_attn, mlp_ratio=mlp_ratio)
            for i in range(depth))
        self.norm = nn.LayerNorm(dim, eps=LN_EPS) if out_norm else None
        self.out_channels = tuple(dim for _ in out_blocks)
        self.register_buffer("mean", torch.tensor(IMAGENET_MEAN).view(1, 3, 1, 1), persistent=False)
        self.register_buffer("std", torch.tensor(IMAGENET_STD).view(1, 3, 1, 1), persistent=False)
        nn.init.trunc_normal_(self.pos_embed, std=0.02)
        trunc_normal_linears(self)

    def grid_pos(self, gh: int, gw: int) -> Tensor:
        """The position embedding's grid rows for a ``gh x gw`` token grid: Tensor[1, gh*gw, dim]."""
        body = self.pos_embed[:, 1:]
        g = self.pos_grid
        if (gh, gw) == (g, g):
            return body
        d = body.shape[-1]
        if self.pos_antialias:  # separable: rows then columns, as two matrix products (ONNX-portable)
            grid = body.reshape(g, g, d).float()
            ah, aw = antialias_matrix(g, gh, body.device), antialias_matrix(g, gw, body.device)
            out = torch.einsum("yi,ijd->yjd", ah, grid)
            out = torch.einsum("xj,yjd->yxd", aw, out)
            return out.reshape(1, gh * gw, d).to(body.dtype)
        img = body.reshape(1, g, g, d).permute(0, 3, 1, 2).float()
        img = F.interpolate(img, size=(gh, gw), mode="bicubic", align_corners=False)
        return img.permute(0, 2, 3, 1).reshape(1, gh * gw, d).to(body.dtype)

    def forward(self, x: Tensor) -> list[Tensor]:
        x = (x - self.mean.to(x.dtype)) / self.std.to(x.dtype)
        t, (gh, gw) = self.patch_embed(x)
        b, _, c = t.shape
        n = self.windows
        if gh % n or gw % n:
            raise ConfigError(f"the {gh}x{gw} token grid does not split into {n}x{n} windows; use input sides that "
                              f"are multiples of {self.patch * n}")
        t = t + self.grid_pos(gh, gw)
        if self.cls_token is None:  # LW-DETR: the plain window split
            t = t.reshape(b, n, gh // n, n, gw // n, c).permute(0, 1, 3, 2, 4, 5)
        else:  # DINOv2-windowed's split (the same for square grids)
            t = t.reshape(b, n, gw // n, n, gh // n, c).transpose(2, 3)
        t = t.reshape(b * n * n, (gh // n) * (gw // n), c)
        if self.cls_token is not None:
            cls = (self.cls_token + self.pos_embed[:, :1]).expand(b * n * n, 1, c)
            t = torch.cat([cls.to(t.dtype), t], 1)
        outs = []
        for i, block in enumerate(self.blocks):
            t = block(t)
            if i in self.out_blocks:
                h = self.norm(t) if self.norm is not None else t
                if self.cls_token is not None:
                    h = h[:, 1:]
                h = h.reshape(b, n, n, gh // n, gw // n, c).permute(0, 5, 1, 3, 2, 4)
                outs.append(h.reshape(b, c, gh, gw))
            if i == max(self.out_blocks):
                break
        return outs
