"""transformers ``DFineForObjectDetection`` weights (``model_type`` ``d_fine``) onto our D-FINE
(n, s). The key mapping lives with the D-FINE network in :mod:`libreyolo.models._detr.hf_convert`;
the ``deim`` family (the same network) reads these files too, when asked for by name."""

from __future__ import annotations

from .._detr.hf_convert import convert_dfine_state_dict as convert_state_dict
from .._detr.hf_convert import match_dfine as match

SOURCES = ("transformers",)
__all__ = ["SOURCES", "match", "convert_state_dict"]
