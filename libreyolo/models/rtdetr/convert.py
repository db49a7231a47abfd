"""transformers ``RTDetrForObjectDetection`` weights (``model_type`` ``rt_detr``) onto our RT-DETR.
The key mapping is shared with RT-DETRv2: :mod:`libreyolo.models._detr.hf_convert`."""

from __future__ import annotations

from .._detr.hf_convert import convert_state_dict, match_size, rename_key
from .variants import VARIANTS

SOURCES = ("transformers",)
__all__ = ["SOURCES", "match", "convert_state_dict", "rename_key"]


def match(fw: object) -> tuple[str, int] | None:
    """``(size, nc)`` for a transformers RT-DETR (v1) checkpoint, else ``None``."""
    return match_size(fw, model_types=("rt_detr",), variants=VARIANTS)
