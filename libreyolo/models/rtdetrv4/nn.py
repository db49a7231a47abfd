"""RT-DETRv4 network: the D-FINE detector with DEIM's SiLU decoder, sizes from the RT-DETRv4 table."""

from __future__ import annotations

from ...errors import ConfigError
from .._detr.dfine_net import DFineDetector
from .._detr.dfine_variants import RTDETRV4_VARIANTS


def build_rtdetrv4(*, size: str, nc: int) -> DFineDetector:
    """The RT-DETRv4 inference network of ``size`` (s, m).

    Example:
        >>> net = build_rtdetrv4(size="s", nc=80)
        >>> sum(p.numel() for p in net.parameters())
        10321875
    """
    if size not in RTDETRV4_VARIANTS:
        raise ConfigError(f"rtdetrv4 has no size {size!r}; sizes: {', '.join(RTDETRV4_VARIANTS)}")
    return DFineDetector(cfg=RTDETRV4_VARIANTS[size].net, nc=nc)
