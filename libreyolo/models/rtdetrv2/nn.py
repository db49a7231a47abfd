"""RT-DETRv2 network: the shared encoder-decoder detector built from this family's size table,
with the v2 decoder options (per-level sampling points, sampling method)."""

from __future__ import annotations

import dataclasses
from typing import Literal

from ...errors import ConfigError
from .._detr.net import EncoderDecoderDetector
from .variants import VARIANTS


def build_rtdetrv2(*, size: str, nc: int, num_points: tuple[int, ...] | None = None,
                   method: Literal["default", "discrete"] | None = None) -> EncoderDecoderDetector:
    """The RT-DETRv2 network of ``size`` (r18, r34); ``num_points`` / ``method`` override the
    decoder's per-level sampling points and sampling operator.

    Example:
        >>> net = build_rtdetrv2(size="r18", nc=80, num_points=(4, 4, 2))  # doctest: +SKIP
    """
    if size not in VARIANTS:
        raise ConfigError(f"rtdetrv2 has no size {size!r}; sizes: {', '.join(VARIANTS)}")
    cfg = VARIANTS[size].net
    if num_points is not None:
        cfg = dataclasses.replace(cfg, num_points=tuple(int(p) for p in num_points))
    if method is not None:
        cfg = dataclasses.replace(cfg, method=method)
    return EncoderDecoderDetector(cfg=cfg, nc=nc)
