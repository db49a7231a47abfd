"""The DPT neck shared by the Depth Anything families.

Four (B, D, h, w) maps on the ViT token grid, finest first -> (B, fusion, 8h, 8w):

1. reassemble: per map a 1x1 projection to its neck width, then a resize to 4x (transposed conv
   4/4), 2x (transposed conv 2/2), 1x, 1/2x (3x3 conv, stride 2) -- the :data:`FACTORS`; with
   ``uv`` on, a sinusoidal UV position embedding (:func:`add_uv_embed`) is added between the two;
2. a 3x3 conv (no bias) to the fusion width;
3. fusion from the coarsest map up: ``x = rcu2(x + rcu1(skip))`` (the coarsest has no ``x`` yet and
   no ``rcu1``), bilinear upsampling (``align_corners=True``) to the next map's size (2x after the
   finest), a 1x1 projection; ``rcu(y) = y + conv(relu(conv(relu(y))))`` (3x3 convs with bias).

Static shapes only decide sizes: no data-dependent control flow (CUDA-graph capturable).
"""

from __future__ import annotations

import torch
import torch.nn.functional as F
from torch import Tensor, nn

FACTORS = (4, 2, 1, 0.5)  # the reassemble resize of each tapped block, finest first
UV_RATIO = 0.1  # the weight of the UV embedding added to a map


def uv_embed(h: int, w: int, c: int, *, aspect: float, dtype: torch.dtype, device: torch.device) -> Tensor:
    """The UV position embedding Tensor[c, h, w] float32 of an ``h x w`` map (Depth Anything 3).

    The grid spans ``[-sx, sx] x [-sy, sy]`` (``sx = aspect / sqrt(aspect^2 + 1)``, ``sy = 1 /
    sqrt(aspect^2 + 1)``, each shrunk by ``(n - 1) / n``), coordinates made in ``dtype``; channels
    are ``[sin(u w_k), cos(u w_k), sin(v w_k), cos(v w_k)]`` with ``w_k = 100^(-k / (c/4))``,
    ``k < c/4``, computed in float32.

    Example:
        >>> tuple(uv_embed(2, 3, 8, aspect=1.5, dtype=torch.float32, device=torch.device("cpu")).shape)
        (8, 2, 3)
    """
    diag = (aspect ** 2 + 1.0) ** 0.5
    sx, sy = aspect / diag, 1.0 / diag
    xs = torch.linspace(-sx * (w - 1) / w, sx * (w - 1) / w, steps=w, dtype=dtype, device=device)
    ys = torch.linspace(-sy * (h - 1) / h, sy * (h - 1) / h, steps=h, dtype=dtype, device=device)
    uu, vv = torch.meshgrid(xs, ys, indexing="xy")  # each (h, w)
    quarter = c // 4
    omega = torch.arange(quarter, dtype=torch.float32, device=device) / (c / 4.0)
    omega = 1.0 / 100.0 ** omega  # (c/4,)

    def sincos(p: Tensor) -> Tensor:
        out = torch.einsum("m,d->md", p.reshape(-1), omega)  # (h*w, c/4)
        return torch.cat([torch.sin(out), torch.cos(out)], dim=1).float()

    emb = torch.cat([sincos(uu), sincos(vv)], dim=-1)  # (h*w, c)
    return emb.view(h, w, c).permute(2, 0, 1)


def add_uv_embed(x: Tensor, aspect: float) -> Tensor:
    """``x + 0.1 * uv_embed`` for a map Tensor[B, C, h, w] (``aspect`` = image width / height), in
    ``x``'s dtype (the embedding is computed in float32 and cast: a half-precision twin stays half)."""
    h, w = int(x.shape[-2]), int(x.shape[-1])
    pe = uv_embed(h, w, int(x.shape[1]), aspect=aspect, dtype=x.dtype, device=x.device) * UV_RATIO
    return x + pe.to(x.dtype)[None].expand(x.shape[0], -1, -1, -1)


class Reassemble(nn.Module):
    """(B, D, h, w) -> (B, c, f*h, f*w): 1x1 projection, (the UV embedding,) the resize of factor ``f``."""

    def __init__(self, dim: int, c: int, factor: float, *, uv: bool = False) -> None:
        super().__init__()
        self.uv = uv
        self.proj = nn.Conv2d(dim, c, 1)
        if factor > 1:
            self.resize: nn.Module = nn.ConvTranspose2d(c, c, int(factor), stride=int(factor))
        elif factor == 1:
            self.resize = nn.Identity()
        else:
            self.resize = nn.Conv2d(c, c, 3, stride=int(round(1 / factor)), padding=1)

    def forward(self, x: Tensor, aspect: float = 1.0) -> Tensor:
        y = self.proj(x)
        if self.uv:
            y = add_uv_embed(y, aspect)
        return self.resize(y)


class ResidualConvUnit(nn.Module):
    """``x + conv2(relu(conv1(relu(x))))``, 3x3 convolutions with bias (pre-activation)."""

    def __init__(self, c: int) -> None:
        super().__init__()
        self.conv1 = nn.Conv2d(c, c, 3, padding=1)
        self.conv2 = nn.Conv2d(c, c, 3, padding=1)

    def forward(self, x: Tensor) -> Tensor:
        return x + self.conv2(F.relu(self.conv1(F.relu(x))))


class Fusion(nn.Module):
    """One fusion step: ``rcu2(x + rcu1(skip))`` (``rcu2(skip)`` for the first), upsampled, projected."""

    def __init__(self, c: int, *, first: bool) -> None:
        super().__init__()
        self.res1 = None if first else ResidualConvUnit(c)
        self.res2 = ResidualConvUnit(c)
        self.proj = nn.Conv2d(c, c, 1)

    def forward(self, skip: Tensor, x: Tensor | None, size: tuple[int, int] | None) -> Tensor:
        y = skip if x is None or self.res1 is None else x + self.res1(skip)
        y = self.res2(y)
        if size is None:
            y = F.interpolate(y, scale_factor=2.0, mode="bilinear", align_corners=True)
        else:
            y = F.interpolate(y, size=size, mode="bilinear", align_corners=True)
        return self.proj(y)


class Neck(nn.Module):
    """Four encoder maps -> the finest fused map (B, fusion, 8h, 8w) (module docstring).

    Example:
        >>> neck = Neck(16, (4, 4, 8, 8), 8, uv=True)
        >>> tuple(neck([torch.rand(1, 16, 3, 4) for _ in range(4)], aspect=4 / 3).shape)
        (1, 8, 24, 32)
    """

    def __init__(self, dim: int, widths: tuple[int, ...], fusion: int, *, uv: bool = False) -> None:
        super().__init__()
        self.reassemble = nn.ModuleList(Reassemble(dim, c, f, uv=uv) for c, f in zip(widths, FACTORS, strict=True))
        self.convs = nn.ModuleList(nn.Conv2d(c, fusion, 3, padding=1, bias=False) for c in widths)
        self.fusion = nn.ModuleList(Fusion(fusion, first=i == 0) for i in range(len(widths)))

    def forward(self, maps: list[Tensor], aspect: float = 1.0) -> Tensor:
        feats = [conv(r(m, aspect)) for m, r, conv in zip(maps, self.reassemble, self.convs, strict=True)][::-1]
        x: Tensor | None = None
        for i, (f, layer) in enumerate(zip(feats, self.fusion, strict=True)):
            size = (int(feats[i + 1].shape[2]), int(feats[i + 1].shape[3])) if i + 1 < len(feats) else None
            x = layer(f, x, size)
        assert x is not None
        return x
