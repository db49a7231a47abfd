"""Reader for the official YOLOX checkpoints (Megvii-BaseDetection/YOLOX ``yolox_*.pth``): a
``torch.save`` of a plain dict ``{"model": state_dict, "optimizer": ..., "start_epoch": ...}``, read
with ``torch.load(weights_only=True)`` (no code runs). The released weights are Apache-2.0.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import torch

from . import ForeignWeights, torchsave

SOURCE = "yolox"
_MARKERS = ("backbone.backbone.stem.conv.conv.weight", "head.cls_preds.0.weight")


def _state_dict(obj: Any) -> dict[str, torch.Tensor] | None:
    return torchsave.marked_state_dict(obj, _MARKERS, under="model")


def recognise(path: Path) -> bool:
    """A ``torch.save`` archive holding a YOLOX state dict (alone or under ``"model"``)."""
    return torchsave.recognise(path, (_MARKERS,), _state_dict)


def read(path: Path) -> ForeignWeights:
    """:class:`ForeignWeights` of an official YOLOX checkpoint (module docstring)."""
    sd = torchsave.read(path, _state_dict, holds_no="YOLOX state dict")
    return ForeignWeights(source=SOURCE, arch="yolox", state_dict=dict(sd), path=str(path),
                          licence="Apache-2.0 (official YOLOX weights)")
