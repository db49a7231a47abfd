"""Reader for the official YOLOX checkpoints (Megvii-BaseDetection/YOLOX ``yolox_*.pth``): a
``torch.save`` of a plain dict ``{"model": state_dict, "optimizer": ..., "start_epoch": ...}``, read
with ``torch.load(weights_only=True)`` (no code runs). The released weights are Apache-2.0.
"""

from __future__ import annotations

import zipfile
from pathlib import Path
from typing import Any

import torch

from ..errors import CheckpointError
from . import ForeignWeights

SOURCE = "yolox"
_MARKERS = ("backbone.backbone.stem.conv.conv.weight", "head.cls_preds.0.weight")


def _load(path: Path) -> Any:
    return torch.load(path, map_location="cpu", weights_only=True)


def _state_dict(obj: Any) -> dict[str, torch.Tensor] | None:
    if not isinstance(obj, dict) or "libreyolo" in obj:
        return None
    sd = obj.get("model", obj)
    if isinstance(sd, dict) and all(k in sd for k in _MARKERS) and all(isinstance(v, torch.Tensor) for v in sd.values()):
        return sd
    return None


def recognise(path: Path) -> bool:
    """A ``torch.save`` archive holding a YOLOX state dict (alone or under ``"model"``)."""
    if not zipfile.is_zipfile(path):
        return False
    try:  # a look at the pickle's bytes first (no tensor is read): its key names
        with zipfile.ZipFile(path) as z:
            pkl = [n for n in z.namelist() if n.endswith("data.pkl") and n.count("/") <= 1]
            head = z.read(pkl[0]) if pkl else b""
        if b"libreyolo" in head or not all(m.encode() in head for m in _MARKERS):
            return False
        return _state_dict(_load(path)) is not None
    except Exception:  # noqa: BLE001 - unreadable here: not recognised, read_checkpoint says why
        return False


def read(path: Path) -> ForeignWeights:
    """:class:`ForeignWeights` of an official YOLOX checkpoint (module docstring)."""
    try:
        sd = _state_dict(_load(path))
    except Exception as e:  # noqa: BLE001 - every read failure becomes one sentence
        raise CheckpointError(f"'{path}' is not a readable checkpoint (truncated or corrupt: {type(e).__name__}); "
                              "use another copy or download it again.") from e
    if sd is None:
        raise CheckpointError(f"'{path}' holds no YOLOX state dict.")
    return ForeignWeights(source=SOURCE, arch="yolox", state_dict=dict(sd), path=str(path),
                          licence="Apache-2.0 (official YOLOX weights)")
