"""The RTMDet size table: :mod:`libreyolo.models._rtmdet.variants`, re-exported here."""

from .._rtmdet.variants import P5_STAGES, VARIANTS, RTMDetVariant

__all__ = ["P5_STAGES", "VARIANTS", "RTMDetVariant"]
