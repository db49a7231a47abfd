"""transformers CLIP checkpoints (``model_type`` ``"clip"`` or ``"clip_vision_model"``) onto the
CLIP tower (names: :mod:`libreyolo.models._vit.tower_convert`; the text tower is dropped, the
class head waits for :meth:`set_class_embeddings`)."""

from __future__ import annotations

from typing import Any

from .._vit.tower_convert import NO_CLASSES_NC, convert_state_dict, match_tower
from .nn import SPECS

SOURCES = ("transformers",)
MODEL_TYPES = ("clip", "clip_vision_model")
SIZES = {(spec.dim, spec.patch): size for size, spec in SPECS.items()}  # (width, patch) -> size
__all__ = ["SOURCES", "MODEL_TYPES", "NO_CLASSES_NC", "match", "convert_state_dict"]


def match(fw: Any) -> tuple[str, int] | None:
    return match_tower(fw, MODEL_TYPES, SIZES)
