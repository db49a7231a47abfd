"""D-FINE network: the shared HGNetv2 / ELAN encoder / FDR decoder detector from the size table."""

from __future__ import annotations

from ...errors import ConfigError
from .._detr.dfine_net import DFineDetector
from .._detr.dfine_variants import VARIANTS


def build_dfine(*, size: str, nc: int) -> DFineDetector:
    """The D-FINE network of ``size`` (n, s).

    Example:
        >>> net = build_dfine(size="n", nc=80)  # doctest: +SKIP
    """
    if size not in VARIANTS:
        raise ConfigError(f"dfine has no size {size!r}; sizes: {', '.join(VARIANTS)}")
    return DFineDetector(cfg=VARIANTS[size].net, nc=nc)
