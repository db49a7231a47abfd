"""DEIM network: the D-FINE detector (HGNetv2 / ELAN encoder / FDR decoder) from the D-FINE size table,
with DEIM's SiLU decoder activations (:func:`~libreyolo.models._detr.dfine_variants.deim_net`)."""

from __future__ import annotations

from ...errors import ConfigError
from .._detr.dfine_net import DFineDetector
from .._detr.dfine_variants import VARIANTS, deim_net


def build_deim(*, size: str, nc: int) -> DFineDetector:
    """The DEIM-D-FINE network of ``size`` (n, s).

    Example:
        >>> net = build_deim(size="n", nc=80)  # doctest: +SKIP
    """
    if size not in VARIANTS:
        raise ConfigError(f"deim has no size {size!r}; sizes: {', '.join(VARIANTS)}")
    return DFineDetector(cfg=deim_net(VARIANTS[size].net), nc=nc)
