"""YOLOv9 postprocess (dense decode + NMS) and captured decode: :mod:`libreyolo.models._gelan.postprocess`,
re-exported here under this family."""

from .._gelan.postprocess import MAX_CANDIDATES, decode, postprocess

__all__ = ["MAX_CANDIDATES", "decode", "postprocess"]
