"""transformers SigLIP checkpoints (``model_type`` ``"siglip"`` or ``"siglip_vision_model"``: the
fixed-resolution SigLIP 2 releases use this layout) onto the SigLIP 2 tower (names:
:mod:`libreyolo.models._vit.tower_convert`; the text tower is dropped, ``logit_scale`` /
``logit_bias`` become the head's scale and bias). The NaFlex variant (``"siglip2"``) is not read."""

from __future__ import annotations

from typing import Any

from .._vit.tower_convert import NO_CLASSES_NC, convert_state_dict, match_tower
from .nn import SPECS

SOURCES = ("transformers",)
MODEL_TYPES = ("siglip", "siglip_vision_model")
SIZES = {(spec.dim, spec.patch): size for size, spec in SPECS.items()}  # (width, patch) -> size
__all__ = ["SOURCES", "MODEL_TYPES", "NO_CLASSES_NC", "match", "convert_state_dict"]


def match(fw: Any) -> tuple[str, int] | None:
    return match_tower(fw, MODEL_TYPES, SIZES)
