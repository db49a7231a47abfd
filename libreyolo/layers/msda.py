"""Multi-scale deformable attention (Deformable DETR), shared by the deformable DETR families.

Semantics (the Deformable DETR reference): for every query ``q`` and head ``h``, sample each
feature level ``l`` at ``P`` normalised locations with bilinear interpolation (zero padding,
``align_corners=False``, i.e. pixel ``x = loc_x * W_l - 0.5``) and sum the samples weighted by
the attention weights.

Layout of the op (``ms_deform_attn``):

* ``value``              ``(B, S, H, C)``, S = sum of ``h_l * w_l`` (levels flattened row-major
                         and concatenated in level order), float.
* ``layout``             :class:`LevelLayout`: the level shapes as Python ints *and* as device
                         tensors ``spatial_shapes (L, 2) int64 (h, w)`` and
                         ``level_start_index (L,) int64``.
* ``sampling_locations`` ``(B, Q, H, L, P, 2)`` float, ``(x, y)`` in ``[0, 1]``; or
                         ``(B, Q, H, sum(P_l), 2)`` with ``num_points=(P_0, ..., P_{L-1})``
                         (different point counts per level); or an *integer* tensor of pixel
                         indices ``(x, y)`` (discrete sampling, nearest pixel, clamped).
* ``attention_weights``  ``(B, Q, H, L, P)`` (or ``(B, Q, H, sum(P_l))``).
* returns                ``(B, Q, H * C)`` in ``value.dtype``.

Only the standard layout (same ``P`` on every level, float locations) consults the
``ms_deform_attn`` kernel slot; the two other layouts always run the portable path (K-8), the
pure-PyTorch :func:`ms_deform_attn_portable`, which lives in
:mod:`libreyolo.kernels.attention.msda_ref` (so the kernel providers need not import layers) and
is importable from here as before.

Capture safety: the portable path splits ``value`` with the Python-int shapes of the layout and
never reads a device value; :func:`level_layout` builds the device tensors with fill kernels
(no host-to-device copy, no sync) and memoises them outside a capture, so a warm-up before
capture makes the capture reuse the same tensors.
"""

from __future__ import annotations

import logging
import math
import threading
from collections import OrderedDict
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Literal

import torch
from torch import Tensor, nn

from ..errors import ConfigError
from ..kernels import registry as _registry
from ..kernels.attention import MS_DEFORM_ATTN, KernelFallback
from ..kernels.attention.msda_ref import Shapes, ms_deform_attn_portable, normalise_shapes
from ..kernels.context import eager_only, is_capturing

logger = logging.getLogger(__name__)


@dataclass(frozen=True, kw_only=True, eq=False)
class LevelLayout:
    """Level bookkeeping of one multi-scale feature pyramid.

    shapes (tuple of (h, w) Python ints): static sizes, used for the portable path's splits.
    spatial_shapes (Tensor[L, 2], int64, on the value device): the same sizes, for kernels.
    level_start_index (Tensor[L], int64): offset of each level in the flattened ``S`` axis.
    normalizer (Tensor[L, 2], int64): ``(w, h)`` per level, to turn pixel offsets into
        normalised offsets without indexing a device tensor.
    """

    shapes: Shapes
    spatial_shapes: Tensor
    level_start_index: Tensor
    normalizer: Tensor

    @property
    def num_levels(self) -> int:
        return len(self.shapes)

    @property
    def total(self) -> int:
        """S, the length of the flattened value axis."""
        return sum(h * w for h, w in self.shapes)


_CACHE_SIZE = 64
_cache: OrderedDict[tuple[Shapes, torch.device], LevelLayout] = OrderedDict()
_cache_lock = threading.Lock()


def _build(shapes: Shapes, device: torch.device) -> LevelLayout:
    # Fill kernels with scalar arguments: valid inside a capture (no pageable H2D copy).
    num = len(shapes)
    spatial = torch.empty((num, 2), dtype=torch.int64, device=device)
    starts = torch.empty((num,), dtype=torch.int64, device=device)
    norm = torch.empty((num, 2), dtype=torch.int64, device=device)
    start = 0
    for i, (h, w) in enumerate(shapes):
        spatial[i, 0].fill_(h)
        spatial[i, 1].fill_(w)
        norm[i, 0].fill_(w)
        norm[i, 1].fill_(h)
        starts[i].fill_(start)
        start += h * w
    return LevelLayout(
        shapes=shapes, spatial_shapes=spatial, level_start_index=starts, normalizer=norm
    )


def level_layout(
    shapes: Sequence[Sequence[int]], *, device: torch.device | str = "cpu"
) -> LevelLayout:
    """The :class:`LevelLayout` of ``shapes`` on ``device``, memoised (bounded LRU).

    In eager mode outside a CUDA-graph capture the result is cached, so the warm-up that precedes
    a capture creates the tensors the graph then reads. Inside a capture a cache miss builds
    fresh tensors (recorded fill kernels) that are not cached, because their values only exist
    on replay; under tracing, compiling or export the layout is always built in the program.

    Example:
        >>> layout = level_layout([(8, 8), (4, 4)], device="cpu")
        >>> layout.level_start_index.tolist()
        [0, 64]
    """
    key = (normalise_shapes(shapes), torch.device(device))
    if not eager_only():
        # tracing / compiling / exporting: build in the traced program, never cache (the tensors
        # here may be fake or symbolic and must not leak into eager calls)
        return _build(*key)
    with _cache_lock:
        hit = _cache.get(key)
        if hit is not None:
            _cache.move_to_end(key)
            return hit
    # normal tensors even when first asked for under inference_mode (a predict): the cache outlives
    # the call, and a training step's kernel saves these tensors for its backward
    with torch.inference_mode(False):
        layout = _build(*key)
    if is_capturing():
        return layout
    with _cache_lock:
        _cache[key] = layout
        while len(_cache) > _CACHE_SIZE:
            _cache.popitem(last=False)
    return layout


def ms_deform_attn(
    value: Tensor,
    layout: LevelLayout,
    sampling_locations: Tensor,
    attention_weights: Tensor,
    *,
    num_points: Sequence[int] | None = None,
) -> Tensor:
    """Multi-scale deformable attention through the ``ms_deform_attn`` slot.

    The standard layout asks the kernel registry for an implementation; when none applies
    (CPU, export, tracing, no provider, ``LIBREYOLO_KERNELS=off``) or the layout is one of the
    two special ones, the portable path runs. Tensor contract: see
    :func:`ms_deform_attn_portable`.
    """
    standard = num_points is None and sampling_locations.is_floating_point()
    # outside plain eager (tracing, compiling, exporting) no provider applies: skip the lookup
    if standard and eager_only():
        args = (
            value,
            layout.spatial_shapes,
            layout.level_start_index,
            sampling_locations,
            attention_weights,
        )
        fn = _registry.resolve(MS_DEFORM_ATTN, *args)
        if fn is not None:
            try:
                return fn(*args)
            except KernelFallback as e:  # the provider disabled itself with one warning
                logger.debug("ms_deform_attn: provider fell back: %s", e)
    return ms_deform_attn_portable(
        value, layout.shapes, sampling_locations, attention_weights, num_points=num_points
    )


class MSDeformAttn(nn.Module):
    """Multi-scale deformable attention layer (Deformable DETR / RT-DETR decoders).

    Args:
        embed_dim: model width ``D`` (divisible by ``num_heads``).
        num_heads: ``H``.
        num_levels: ``L``.
        num_points: ``P`` on every level, or one count per level (mixed layout).
        method: ``"default"`` (bilinear) or ``"discrete"`` (nearest pixel, integer indices).
        offset_scale: scale of the offsets for box reference points (``0.5`` in the papers).
        project: learn the value and output projections (``True``, Deformable DETR / RT-DETR);
            ``False`` makes both the identity (the D-FINE decoder samples the memory directly).

    forward(query, reference_points, value, shapes, value_mask=None):
        query (Tensor[B, Q, D]); reference_points (Tensor[B, Q, L, 2] normalised centres, or
        Tensor[B, Q, L, 4] normalised ``cx, cy, w, h`` boxes); value (Tensor[B, S, D]);
        shapes: ``(h, w)`` per level (Python ints); value_mask (Tensor[B, S] bool, True =
        padding, zeroed) -> Tensor[B, Q, D].

    Example:
        >>> m = MSDeformAttn(embed_dim=32, num_heads=4, num_levels=2, num_points=2)
        >>> out = m(torch.rand(1, 3, 32), torch.rand(1, 3, 2, 2), torch.rand(1, 20, 32),
        ...         [(4, 4), (2, 2)])
        >>> tuple(out.shape)
        (1, 3, 32)
    """

    def __init__(
        self,
        *,
        embed_dim: int = 256,
        num_heads: int = 8,
        num_levels: int = 4,
        num_points: int | Sequence[int] = 4,
        method: Literal["default", "discrete"] = "default",
        offset_scale: float = 0.5,
        project: bool = True,
    ) -> None:
        super().__init__()
        if embed_dim % num_heads:
            raise ConfigError(
                f"embed_dim={embed_dim} is not divisible by num_heads={num_heads}; pick a "
                "head count that divides the width"
            )
        if method not in ("default", "discrete"):
            raise ConfigError(f"method must be 'default' or 'discrete', got {method!r}")
        points = [num_points] * num_levels if isinstance(num_points, int) else list(num_points)
        if len(points) != num_levels or any(p <= 0 for p in points):
            raise ConfigError(
                f"num_points={num_points!r} must be a positive int or {num_levels} positive ints"
            )
        self.embed_dim, self.num_heads, self.num_levels = embed_dim, num_heads, num_levels
        self.num_points_list = tuple(int(p) for p in points)
        self.uniform = len(set(self.num_points_list)) == 1
        self.method = method
        self.offset_scale = offset_scale
        total = sum(self.num_points_list)
        self.sampling_offsets = nn.Linear(embed_dim, num_heads * total * 2)
        self.attention_weights = nn.Linear(embed_dim, num_heads * total)
        self.value_proj: nn.Module = nn.Linear(embed_dim, embed_dim) if project else nn.Identity()
        self.output_proj: nn.Module = nn.Linear(embed_dim, embed_dim) if project else nn.Identity()
        # 1/P_l per sampled point, for box reference points (a buffer: no host value in forward)
        scale = torch.cat([torch.full((p,), 1.0 / p) for p in self.num_points_list])
        self.register_buffer("point_scale", scale, persistent=False)
        level = torch.cat([torch.full((p,), i, dtype=torch.int64) for i, p in enumerate(points)])
        self.register_buffer("point_level", level, persistent=False)  # (sumP,) level of a point
        self.reset_parameters()

    def reset_parameters(self) -> None:
        """Offsets start on a ring of directions (one per head), growing with the point index;
        attention weights start uniform."""
        nn.init.zeros_(self.sampling_offsets.weight)
        angles = torch.arange(self.num_heads, dtype=torch.float32) * (
            2.0 * math.pi / self.num_heads
        )
        ring = torch.stack([angles.cos(), angles.sin()], -1)  # (H, 2)
        ring = ring / ring.abs().max(-1, keepdim=True).values
        bias = [
            ring[:, None, :] * torch.arange(1, p + 1)[None, :, None] for p in self.num_points_list
        ]
        with torch.no_grad():
            self.sampling_offsets.bias.copy_(torch.cat(bias, dim=1).flatten())
        nn.init.zeros_(self.attention_weights.weight)
        nn.init.zeros_(self.attention_weights.bias)
        for proj in (self.value_proj, self.output_proj):
            if isinstance(proj, nn.Linear):
                nn.init.xavier_uniform_(proj.weight)
                nn.init.zeros_(proj.bias)

    def forward(
        self,
        query: Tensor,
        reference_points: Tensor,
        value: Tensor,
        shapes: Sequence[Sequence[int]],
        value_mask: Tensor | None = None,
    ) -> Tensor:
        b, q, _ = query.shape
        heads, total = self.num_heads, sum(self.num_points_list)
        layout = level_layout(shapes, device=value.device)
        if layout.num_levels != self.num_levels:
            raise ConfigError(
                f"MSDeformAttn has num_levels={self.num_levels} but got {layout.num_levels} "
                "level shapes"
            )
        v = self.value_proj(value)
        if value_mask is not None:
            v = v.masked_fill(value_mask[..., None], 0.0)
        v = v.view(b, v.shape[1], heads, self.embed_dim // heads)  # (B, S, H, C)
        offsets = self.sampling_offsets(query).view(b, q, heads, total, 2)
        # softmax over all levels and points of a (query, head)
        weights = self.attention_weights(query).view(b, q, heads, total).softmax(-1)
        # per-point level index -> reference and (w, h) normaliser per point: (B, Q, sumP, k)
        ref = reference_points.index_select(2, self.point_level)
        if reference_points.shape[-1] == 2:
            norm = layout.normalizer.index_select(0, self.point_level).to(offsets.dtype)
            loc = ref[:, :, None] + offsets / norm  # (B, Q, H, sumP, 2)
        elif reference_points.shape[-1] == 4:
            step = self.point_scale.to(offsets.dtype)[:, None] * ref[:, :, None, :, 2:]
            loc = ref[:, :, None, :, :2] + offsets * step * self.offset_scale
        else:
            raise ConfigError(
                "reference_points must end in 2 (cx, cy) or 4 (cx, cy, w, h), got shape "
                f"{tuple(reference_points.shape)}"
            )
        if self.method == "discrete":
            # nearest pixel (x, y) = floor(loc * (w, h)); the op clamps to the level
            norm = layout.normalizer.index_select(0, self.point_level).to(loc.dtype)
            loc = torch.floor(loc * norm).to(torch.int64)
        if self.uniform:
            levels, points = self.num_levels, self.num_points_list[0]
            out = ms_deform_attn(
                v,
                layout,
                loc.view(b, q, heads, levels, points, 2),
                weights.view(b, q, heads, levels, points),
            )
        else:
            out = ms_deform_attn(v, layout, loc, weights, num_points=self.num_points_list)
        return self.output_proj(out)
