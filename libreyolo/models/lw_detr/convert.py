"""transformers ``LwDetrForObjectDetection`` weights (``model_type`` ``lw_detr``) onto our LW-DETR;
the key mapping is :mod:`libreyolo.models._detr.lwdetr_convert`. The size follows the ViT depth
(6: tiny, 10: small)."""

from __future__ import annotations

from ...errors import CheckpointError
from .._detr.lwdetr_convert import convert_state_dict, structure

SOURCES = ("transformers",)
ARCHS = ("lw_detr",)
__all__ = ["SOURCES", "ARCHS", "match", "convert_state_dict"]


def match(fw: object) -> tuple[str, int] | None:
    """``(size, nc)`` for a transformers LW-DETR, else ``None``."""
    if str(getattr(fw, "arch", "")).lower() not in ARCHS:
        return None
    s = structure(getattr(fw, "state_dict", {}))
    size = {6: "tiny", 10: "small"}.get(s["depth"])
    if size is None or s["dec_layers"] != 3:
        raise CheckpointError(f"this lw_detr ({s['depth']} ViT blocks, {s['dec_layers']} decoder layers) matches "
                              "none of the sizes: tiny (6 blocks), small (10 blocks)")
    return size, s["nc"]
