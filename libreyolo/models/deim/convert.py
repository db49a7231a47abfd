"""D-FINE-network weights onto our DEIM (the D-FINE network, trained with the DEIM recipe):
transformers D-FINE files and the original release files (source ``dfine_release``) of
ShihuaHuang95/DEIM (``deim_dfine_hgnetv2_{n,s}_coco.pth``) and Peterande/D-FINE; mappings in
:mod:`libreyolo.models._detr.hf_convert` and :mod:`libreyolo.models._detr.dfine_release_convert`.

``EXPLICIT_ONLY`` (per file): a DEIM release file (``deim`` in its name) is this family's by
default; any other file is ``dfine`` unless the ``deim`` family is asked for by name
(``libreyolo convert src=... model=LibreDEIMs.pt``), so that a file has one default match.
"""

from __future__ import annotations

from .._detr.dfine_release_convert import SOURCE as _RELEASE
from .._detr.dfine_release_convert import convert_any as convert_state_dict
from .._detr.dfine_release_convert import deim_explicit_only as EXPLICIT_ONLY  # noqa: N812
from .._detr.dfine_release_convert import match_any as match

SOURCES = ("transformers", _RELEASE)
__all__ = ["SOURCES", "EXPLICIT_ONLY", "match", "convert_state_dict"]
