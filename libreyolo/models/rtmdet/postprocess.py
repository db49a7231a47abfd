"""RTMDet postprocess (multi-label candidates, distance decode, NMS) and captured decode:
:mod:`libreyolo.models._rtmdet.postprocess`, re-exported here under this family."""

from .._rtmdet.postprocess import MAX_CANDIDATES, decode, decode_boxes, grid_points, postprocess

__all__ = ["MAX_CANDIDATES", "decode", "decode_boxes", "grid_points", "postprocess"]
