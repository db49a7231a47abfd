"""Weights of other origins onto our D-FINE (n, s):

- transformers ``DFineForObjectDetection`` (``model_type`` ``d_fine``): the key mapping lives with
  the D-FINE network in :mod:`libreyolo.models._detr.hf_convert`;
- the original release files of Peterande/D-FINE (``dfine_{n,s}_coco.pth``, source
  ``dfine_release``): :mod:`libreyolo.models._detr.dfine_release_convert`.

The ``deim`` family (the same network) reads these files too, when asked for by name; a DEIM
release file (``deim`` in its name) is ``deim``'s by default and this family's only when named
(``EXPLICIT_ONLY`` decides per file).
"""

from __future__ import annotations

from .._detr.dfine_release_convert import SOURCE as _RELEASE
from .._detr.dfine_release_convert import convert_any as convert_state_dict
from .._detr.dfine_release_convert import dfine_explicit_only as EXPLICIT_ONLY  # noqa: N812
from .._detr.dfine_release_convert import match_any as match

SOURCES = ("transformers", _RELEASE)
__all__ = ["SOURCES", "EXPLICIT_ONLY", "match", "convert_state_dict"]
