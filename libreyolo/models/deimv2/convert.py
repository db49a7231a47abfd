"""transformers ``Deimv2ForObjectDetection`` weights (``model_type`` ``deimv2``) onto our DEIMv2
(atto, femto, pico, n). The key mapping lives with the network in :mod:`libreyolo.models._detr.deimv2_convert`."""

from __future__ import annotations

from .._detr.deimv2_convert import convert_deimv2_state_dict as convert_state_dict
from .._detr.deimv2_convert import match_deimv2

SOURCES = ("transformers",)
MODEL_TYPE = "deimv2"  # transformers' config.model_type of these checkpoints


def match(fw: object) -> tuple[str, int] | None:
    """``(size, nc)`` of a transformers DEIMv2 checkpoint, None for another model type."""
    return match_deimv2(fw, arch=MODEL_TYPE)


__all__ = ["SOURCES", "match", "convert_state_dict"]
