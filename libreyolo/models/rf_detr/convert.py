"""transformers ``RfDetrForObjectDetection`` weights (``model_type`` ``rf_detr``) onto our RF-DETR;
the key mapping is :mod:`libreyolo.models._detr.lwdetr_convert`. The size follows the position grid
and the decoder depth (24 / 2: nano, 32 / 3: small, 36 / 4: medium, 37 / 3: base)."""

from __future__ import annotations

from ...errors import CheckpointError
from .._detr.lwdetr_convert import convert_state_dict, structure

SOURCES = ("transformers",)
ARCHS = ("rf_detr",)
__all__ = ["SOURCES", "ARCHS", "match", "convert_state_dict"]


def match(fw: object) -> tuple[str, int] | None:
    """``(size, nc)`` for a transformers RF-DETR detector, else ``None``."""
    if str(getattr(fw, "arch", "")).lower() not in ARCHS:
        return None
    from .nn import VARIANTS

    s = structure(getattr(fw, "state_dict", {}))
    for size, cfg in VARIANTS.items():
        if (cfg.pos_grid, cfg.decoder.dec_layers, cfg.depth) == (s["pos"], s["dec_layers"], s["depth"]):
            return size, s["nc"]
    raise CheckpointError(f"this rf_detr (position grid {s['pos']}, {s['dec_layers']} decoder layers, {s['depth']} "
                          f"blocks) matches none of the sizes {', '.join(VARIANTS)}")
