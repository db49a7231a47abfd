"""DEIMv2 network: three-stage HGNetv2 / lite encoder / DEIMv2 FDR decoder from the size table."""

from __future__ import annotations

from ...errors import ConfigError
from .._detr.deimv2_net import Deimv2Detector
from .._detr.deimv2_variants import VARIANTS


def build_deimv2(*, size: str, nc: int) -> Deimv2Detector:
    """The DEIMv2 network of ``size`` (atto, femto, pico, n).

    Example:
        >>> net = build_deimv2(size="atto", nc=80)
        >>> round(sum(p.numel() for p in net.parameters()) / 1e6, 2)
        0.51
    """
    if size not in VARIANTS:
        raise ConfigError(f"deimv2 has no size {size!r}; sizes: {', '.join(VARIANTS)}")
    return Deimv2Detector(cfg=VARIANTS[size].net, nc=nc)
