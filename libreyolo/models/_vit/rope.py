"""2D rotary position embedding (RoPE) for ViT tokens, as Depth Anything 3's later blocks use it.

Each head's channels ``C`` split into halves: the first is rotated by the token's row, the second
by its column. Within a half of ``c = C/2`` channels the rotation angles are ``p * f_k`` with
``f_k = base^(-2k / c)`` for ``k < c/2``, repeated twice (``[a, a]``), and a vector ``x = [x1, x2]``
becomes ``x * cos + [-x2, x1] * sin``. Positions are built from static grid sizes
(:func:`grid_positions`), so nothing reads a tensor value back to the host.
"""

from __future__ import annotations

from collections.abc import Callable

import torch
from torch import Tensor


def grid_positions(gh: int, gw: int, *, prefix: int, device: torch.device, flat: bool = False) -> Tensor:
    """Positions Tensor[N, 2] (row, column) of ``prefix`` special tokens then a ``gh x gw`` grid:
    the specials at 0, the grid at ``(i + 1, j + 1)``; with ``flat`` every grid token at ``(1, 1)``.

    Example:
        >>> grid_positions(1, 2, prefix=1, device=torch.device("cpu")).tolist()
        [[0, 0], [1, 1], [1, 2]]
    """
    if flat:
        grid = torch.ones(gh * gw, 2, dtype=torch.long, device=device)
    else:
        grid = torch.cartesian_prod(torch.arange(gh, device=device), torch.arange(gw, device=device)) + 1
    return torch.cat([torch.zeros(prefix, 2, dtype=torch.long, device=device), grid], dim=0)


def _rotate(x: Tensor, cos: Tensor, sin: Tensor) -> Tensor:
    half = x.shape[-1] // 2
    return x * cos + torch.cat((-x[..., half:], x[..., :half]), dim=-1) * sin


def rope_2d(pos: Tensor, head_dim: int, *, base: float = 100.0) -> Callable[[Tensor], Tensor]:
    """The rotation for tokens at ``pos`` (Tensor[N, 2] long): a function Tensor[B, H, N, C] -> same,
    ``C == head_dim`` (divisible by 4). Tables are made in the tokens' dtype on first use.

    Example:
        >>> rot = rope_2d(grid_positions(2, 2, prefix=1, device=torch.device("cpu")), 8)
        >>> q = torch.rand(1, 2, 5, 8)
        >>> bool(torch.equal(rot(q)[:, :, 0], q[:, :, 0]))  # position 0: no rotation
        True
    """
    c = head_dim // 2
    inv = 1.0 / (base ** (torch.arange(0, c, 2, device=pos.device).float() / c))  # (c/2,)

    def tables(p: Tensor, dtype: torch.dtype) -> tuple[Tensor, Tensor]:
        ang = (p.to(inv.dtype)[:, None] * inv[None]).to(dtype)  # (N, c/2)
        ang = torch.cat((ang, ang), dim=-1)  # (N, c)
        return ang.cos().to(dtype), ang.sin().to(dtype)

    def apply(x: Tensor) -> Tensor:
        (cy, sy), (cx, sx) = tables(pos[:, 0], x.dtype), tables(pos[:, 1], x.dtype)
        rows, cols = x.chunk(2, dim=-1)
        return torch.cat((_rotate(rows, cy, sy), _rotate(cols, cx, sx)), dim=-1)

    return apply
