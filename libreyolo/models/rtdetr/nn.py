"""RT-DETR network: the shared encoder-decoder detector built from this family's size table."""

from __future__ import annotations

from ...errors import ConfigError
from .._detr.net import EncoderDecoderDetector
from .variants import VARIANTS


def build_rtdetr(*, size: str, nc: int) -> EncoderDecoderDetector:
    """ResNet-vd + hybrid encoder + deformable decoder for ``size`` (r18, r34, r50).

    Example:
        >>> net = build_rtdetr(size="r18", nc=80)  # doctest: +SKIP
    """
    if size not in VARIANTS:
        raise ConfigError(f"rtdetr has no size {size!r}; sizes: {', '.join(VARIANTS)}")
    return EncoderDecoderDetector(cfg=VARIANTS[size].net, nc=nc)
