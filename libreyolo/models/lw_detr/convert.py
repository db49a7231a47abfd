"""transformers ``LwDetrForObjectDetection`` weights (``model_type`` ``lw_detr``) onto our LW-DETR;
the key mapping is :mod:`libreyolo.models._detr.lwdetr_convert`. The size follows the ViT depth and
width and the projector levels (6 / 192 / 1: tiny, 10 / 192 / 1: small, 10 / 384 / 1: medium,
10 / 384 / 2: large, 10 / 768 / 2: xlarge)."""

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
    from .nn import VARIANTS

    s = structure(getattr(fw, "state_dict", {}))
    for size, cfg in VARIANTS.items():
        if (cfg.depth, cfg.dim, cfg.decoder.num_levels, cfg.decoder.dec_layers) == (
                s["depth"], s["dim"], s["levels"], s["dec_layers"]):
            return size, s["nc"]
    raise CheckpointError(f"this lw_detr ({s['depth']} ViT blocks of width {s['dim']}, {s['levels']} projector "
                          f"levels, {s['dec_layers']} decoder layers) matches none of the sizes "
                          + ", ".join(f"{k} ({c.depth} / {c.dim} / {c.decoder.num_levels})" for k, c in VARIANTS.items()))
