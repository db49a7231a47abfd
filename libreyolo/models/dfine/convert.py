"""transformers ``DFineForObjectDetection`` weights (``model_type`` ``d_fine``) onto our D-FINE
(n, s). The key mapping lives with the D-FINE network in :mod:`libreyolo.models._detr.hf_convert`.
(DEIM checkpoints are this architecture; load them as D-FINE, or retrain with the ``deim`` family.)"""

from __future__ import annotations

import re
from collections.abc import Mapping

from torch import Tensor

from ...errors import CheckpointError
from .._detr.dfine_variants import VARIANTS
from .._detr.hf_convert import convert_dfine_state_dict

SOURCES = ("transformers",)
__all__ = ["SOURCES", "match", "convert_state_dict"]


def match(fw: object) -> tuple[str, int] | None:
    """``(size, nc)`` for a transformers D-FINE checkpoint: hidden width and number of feature
    levels from its tensors, else ``None``."""
    if str(getattr(fw, "arch", "")).lower() != "d_fine":
        return None
    sd: Mapping[str, Tensor] = getattr(fw, "state_dict", {})
    hidden = int(sd["model.enc_score_head.weight"].shape[1])
    levels = len({m[1] for k in sd if (m := re.match(r"model\.encoder_input_proj\.(\d+)\.", k))})
    for size, v in VARIANTS.items():
        if v.net.hidden == hidden and len(v.net.return_idx) == levels:
            return size, int(sd["model.enc_score_head.weight"].shape[0])
    raise CheckpointError(f"this D-FINE (hidden {hidden}, {levels} feature levels) matches none of the sizes "
                          f"{', '.join(VARIANTS)}.")


def convert_state_dict(src: Mapping[str, Tensor], own: Mapping[str, Tensor], *, arch: str = "") -> dict[str, Tensor]:
    """transformers D-FINE state dict -> ours (first misfit named)."""
    return convert_dfine_state_dict(src, own, arch=arch)
