"""mmdetection RTMDet checkpoints (``rtmdet_{tiny,s,m,l,x}_8xb32-300e_coco_*.pth``) onto ``rtmdet``:
the lineage's renames and tensor fixes (:mod:`libreyolo.models._rtmdet.convert`). Read by
``LibreYOLO(path)`` through :mod:`libreyolo.convert.mmdet`; fidelity against mmdetection's own
network in ``tests/unit/convert/test_rtmdet_mmdet.py``."""

from __future__ import annotations

from .._rtmdet.convert import SOURCES, convert_state_dict, match_state_dict, rename_key

__all__ = ["SOURCES", "convert_state_dict", "match", "rename_key"]


def match(fw: object) -> tuple[str, int] | None:
    """``(size, nc)`` when ``fw`` holds an RTMDet detector state dict (no dynamic kernels), else ``None``."""
    return match_state_dict(getattr(fw, "state_dict", {}), instance=False)
