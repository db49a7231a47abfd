"""transformers D-FINE weights onto our DEIM (the D-FINE network, trained with the DEIM recipe).

``EXPLICIT_ONLY``: a D-FINE file is ``dfine`` unless the ``deim`` family is asked for by name
(``libreyolo convert src=... model=LibreDEIMs.pt``), so that a file has one default match.
"""

from __future__ import annotations

from .._detr.hf_convert import convert_dfine_state_dict as convert_state_dict
from .._detr.hf_convert import match_dfine as match

SOURCES = ("transformers",)
EXPLICIT_ONLY = True
__all__ = ["SOURCES", "EXPLICIT_ONLY", "match", "convert_state_dict"]
