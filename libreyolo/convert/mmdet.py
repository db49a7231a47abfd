"""Reader for mmdetection RTMDet / RTMDet-Ins checkpoints (open-mmlab/mmdetection
``rtmdet[-ins]_*.pth``): a ``torch.save`` of ``{"meta": {...}, "state_dict": {...}}`` (optimizer and
message hub removed when published), read with ``torch.load(weights_only=True)`` (no code runs).
Class names come from ``meta["dataset_meta"]["classes"]`` when present. The released weights are
Apache-2.0.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import torch

from ..errors import CheckpointError
from . import ForeignWeights, torchsave

SOURCE = "mmdet"
_MARKERS = ("backbone.stem.0.conv.weight", "bbox_head.rtm_cls.0.weight")


def _state_dict(obj: Any) -> dict[str, torch.Tensor] | None:
    return torchsave.marked_state_dict(obj, _MARKERS)


def recognise(path: Path) -> bool:
    """A ``torch.save`` archive holding an RTMDet state dict (alone or under ``"state_dict"``)."""
    return torchsave.recognise(path, (_MARKERS,), _state_dict)


def read(path: Path) -> ForeignWeights:
    """:class:`ForeignWeights` of an mmdetection RTMDet checkpoint (module docstring)."""
    try:
        obj = torchsave.load(path)
    except Exception as e:  # noqa: BLE001 - every read failure becomes one sentence
        raise CheckpointError(f"'{path}' is not a readable checkpoint (truncated, corrupt, or holding objects other "
                              f"than tensors and plain values: {type(e).__name__}); re-save its 'state_dict' alone "
                              "with torch.save.") from e
    sd = _state_dict(obj)
    if sd is None:
        raise CheckpointError(f"'{path}' holds no RTMDet state dict.")
    names = None
    meta = obj.get("meta") if isinstance(obj, dict) else None
    classes = meta.get("dataset_meta", {}).get("classes") if isinstance(meta, dict) else None
    if isinstance(classes, (list, tuple)) and all(isinstance(c, str) for c in classes):
        names = dict(enumerate(classes))
    arch = "rtmdet-ins" if "bbox_head.rtm_kernel.0.weight" in sd else "rtmdet"
    return ForeignWeights(source=SOURCE, arch=arch, state_dict=dict(sd), path=str(path), names=names,
                          licence="Apache-2.0 (mmdetection RTMDet weights)")
