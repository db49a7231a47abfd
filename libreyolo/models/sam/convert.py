"""transformers ``SamModel`` checkpoints (``model_type`` ``sam``) onto our SAM
(:func:`libreyolo.models._sam.convert.convert_hf`); the size is read from the encoder's width
and depth."""

from __future__ import annotations

import re
from collections.abc import Mapping

from torch import Tensor

from ...errors import CheckpointError
from .._sam.convert import convert_hf
from .variants import VARIANTS

SOURCES = ("transformers",)


def match(fw: object) -> tuple[str, int] | None:
    """``(size, 1)`` for a transformers SAM checkpoint, else ``None``."""
    if str(getattr(fw, "arch", "")).lower() != "sam":
        return None
    sd: Mapping[str, Tensor] = getattr(fw, "state_dict", {})
    w = sd.get("vision_encoder.patch_embed.projection.weight")
    if w is None:
        return None
    depth = len({m[1] for k in sd if (m := re.match(r"vision_encoder\.layers\.(\d+)\.", k))})
    for size, v in VARIANTS.items():
        if v[1] == int(w.shape[0]) and v[2] == depth:
            return size, 1
    raise CheckpointError(f"this SAM (width {int(w.shape[0])}, {depth} blocks) matches none of {', '.join(VARIANTS)}")


def convert_state_dict(src: Mapping[str, Tensor], own: Mapping[str, Tensor], *, arch: str = "") -> dict[str, Tensor]:
    return convert_hf(src, own)
