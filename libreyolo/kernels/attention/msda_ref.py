"""Portable multi-scale deformable attention: the path every ``ms_deform_attn`` caller keeps.

Pure PyTorch (``F.grid_sample``), capture safe (splits with Python-int shapes, never reads a
device value). The slot registers no reference (K-6): callers run this when no provider
applies, and the accelerated providers (:mod:`.msda_hub`, :mod:`.msda_triton`) must match it
(the Hub provider also takes its fall-back gradients from it). :mod:`libreyolo.layers.msda`
builds the module and the level layout on top of it and re-exports
:func:`ms_deform_attn_portable`. Tensor layout: see that module's docstring.
"""

from __future__ import annotations

from collections.abc import Sequence

import torch
import torch.nn.functional as F
from torch import Tensor

from ...errors import ConfigError

Shapes = tuple[tuple[int, int], ...]


def normalise_shapes(shapes: Sequence[Sequence[int]]) -> Shapes:
    """Level shapes as a tuple of ``(h, w)`` Python ints; ConfigError if malformed."""
    try:
        out = tuple((int(h), int(w)) for h, w in shapes)
    except (TypeError, ValueError) as e:
        raise ConfigError(
            f"level shapes must be a sequence of (h, w) Python ints, got {shapes!r}; pass "
            "e.g. [tuple(f.shape[-2:]) for f in features]"
        ) from e
    if not out or any(h <= 0 or w <= 0 for h, w in out):
        raise ConfigError(f"level shapes must be non-empty positive (h, w) pairs, got {out!r}")
    return out


def _per_level_maps(value: Tensor, shapes: Shapes) -> list[Tensor]:
    """Split ``value (B, S, H, C)`` into per-level maps ``(B*H, C, h, w)``."""
    b, _, heads, c = value.shape
    parts = value.split([h * w for h, w in shapes], dim=1)
    # (B, h*w, H, C) -> (B, H, C, h*w) -> (B*H, C, h, w)
    return [
        p.permute(0, 2, 3, 1).reshape(b * heads, c, h, w)
        for p, (h, w) in zip(parts, shapes, strict=True)
    ]


def _sample_bilinear(maps: list[Tensor], locations: list[Tensor]) -> list[Tensor]:
    """``maps[l] (N, C, h, w)`` sampled at ``locations[l] (N, Q, P, 2)`` in [0, 1] ->
    ``(N, C, Q, P)`` per level."""
    return [
        F.grid_sample(
            m, 2.0 * loc - 1.0, mode="bilinear", padding_mode="zeros", align_corners=False
        )
        for m, loc in zip(maps, locations, strict=True)
    ]


def _sample_discrete(maps: list[Tensor], locations: list[Tensor]) -> list[Tensor]:
    """Nearest-pixel gather with integer ``(x, y)`` indices (clamped to the level)."""
    out = []
    for m, loc in zip(maps, locations, strict=True):
        n, c, h, w = m.shape
        _, q, p, _ = loc.shape
        x = loc[..., 0].clamp(0, w - 1)
        y = loc[..., 1].clamp(0, h - 1)
        flat = (y * w + x).reshape(n, 1, q * p).expand(n, c, q * p)  # (N, C, Q*P)
        out.append(m.flatten(2).gather(2, flat).view(n, c, q, p))
    return out


def ms_deform_attn_portable(
    value: Tensor,
    shapes: Sequence[Sequence[int]],
    sampling_locations: Tensor,
    attention_weights: Tensor,
    *,
    num_points: Sequence[int] | None = None,
) -> Tensor:
    """Pure-PyTorch multi-scale deformable attention (the portable path; see module docs).

    Args:
        value (Tensor[B, S, H, C], float): flattened multi-level values.
        shapes: ``(h, w)`` Python ints per level.
        sampling_locations (Tensor[B, Q, H, L, P, 2] float in [0, 1], or integer pixel
            indices; or [B, Q, H, sum(P_l), 2] with ``num_points``).
        attention_weights (Tensor[B, Q, H, L, P] or [B, Q, H, sum(P_l)]).
        num_points: per-level point counts for the mixed layout.

    Returns:
        Tensor[B, Q, H*C] in ``value.dtype``.

    Example:
        >>> v = torch.ones(1, 5, 1, 2)
        >>> loc = torch.full((1, 1, 1, 2, 1, 2), 0.5)
        >>> w = torch.full((1, 1, 1, 2, 1), 0.5)
        >>> ms_deform_attn_portable(v, [(2, 2), (1, 1)], loc, w).tolist()
        [[[1.0, 1.0]]]
    """
    shapes = normalise_shapes(shapes)
    b, _, heads, c = value.shape
    q = sampling_locations.shape[1]
    if num_points is None:
        levels, points = sampling_locations.shape[3], sampling_locations.shape[4]
        split = [points] * levels
        loc = sampling_locations.flatten(3, 4)  # (B, Q, H, L*P, 2)
        weights = attention_weights.flatten(3, 4)  # (B, Q, H, L*P)
    else:
        split = [int(p) for p in num_points]
        loc, weights = sampling_locations, attention_weights
    if len(split) != len(shapes):
        raise ConfigError(
            f"sampling locations address {len(split)} levels but the layout has {len(shapes)}; "
            "build the layout from the same feature maps as the value"
        )
    discrete = not loc.is_floating_point()
    # (B, Q, H, sumP, 2) -> (B, H, Q, sumP, 2) -> (B*H, Q, sumP, 2), then per level.
    loc = loc.transpose(1, 2).flatten(0, 1)
    if not discrete:
        loc = loc.to(value.dtype)
    locs = list(loc.split(split, dim=2))
    maps = _per_level_maps(value, shapes)
    samples = _sample_discrete(maps, locs) if discrete else _sample_bilinear(maps, locs)
    stacked = torch.cat(samples, dim=-1)  # (B*H, C, Q, sumP)
    w = weights.to(value.dtype).transpose(1, 2).reshape(b * heads, 1, q, sum(split))
    out = (stacked * w).sum(-1)  # (B*H, C, Q)
    return out.view(b, heads * c, q).transpose(1, 2).contiguous()  # (B, Q, H*C)
