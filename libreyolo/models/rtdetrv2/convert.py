"""transformers ``RTDetrV2ForObjectDetection`` weights (``model_type`` ``rt_detr_v2``) onto our
RT-DETRv2 (the released configs: 4 sampling points on each level, bilinear sampling). The key
mapping is shared with RT-DETR: :mod:`libreyolo.models._detr.hf_convert`."""

from __future__ import annotations

from .._detr.hf_convert import convert_state_dict, match_size, rename_key
from .variants import VARIANTS

SOURCES = ("transformers",)
__all__ = ["SOURCES", "match", "convert_state_dict", "rename_key"]


def match(fw: object) -> tuple[str, int] | None:
    """``(size, nc)`` for a transformers RT-DETRv2 checkpoint, else ``None``."""
    return match_size(fw, model_types=("rt_detr_v2",), variants=VARIANTS)
