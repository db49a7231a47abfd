"""The GELAN blocks, :mod:`libreyolo.models._gelan.elan` (shared by the YOLOv9 lineage), re-exported."""

from .._gelan.elan import ELAN1, SPPELAN, AConv, ADown, RepNBottleneck, RepNCSP, RepNCSPELAN4

__all__ = ["ELAN1", "SPPELAN", "AConv", "ADown", "RepNBottleneck", "RepNCSP", "RepNCSPELAN4"]
