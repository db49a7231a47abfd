"""Reader for super-gradients checkpoints (Deci's ``yolo_nas_{s,m,l}_coco.pth`` and the
``ckpt_best.pth`` its trainer writes): a ``torch.save`` of a plain dict whose ``"net"`` (and, from
training, ``"ema_net"``) entry is the model's state dict, read with ``torch.load(weights_only=True)``
(no code runs). The EMA weights are preferred when present. Deci publishes the YOLO-NAS weights
under its own non-commercial licence (``LICENSE.YOLONAS.md`` of super-gradients).
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import torch

from . import ForeignWeights, torchsave

SOURCE = "super_gradients"
_MARKERS = ("backbone.stem.conv.branch_3x3", "heads.head1.cls_pred")


def _state_dict(obj: Any) -> dict[str, torch.Tensor] | None:
    if not isinstance(obj, dict) or "libreyolo" in obj:
        return None
    for key in ("ema_net", "net"):
        if isinstance(obj.get(key), dict):
            obj = obj[key]
            break
    if not all(isinstance(v, torch.Tensor) for v in obj.values()):
        return None
    sd = {k[len("module."):] if k.startswith("module.") else k: v for k, v in obj.items()}
    return sd if all(any(k.startswith(m) for k in sd) for m in _MARKERS) else None


def recognise(path: Path) -> bool:
    """A ``torch.save`` archive holding a super-gradients YOLO-NAS state dict."""
    return torchsave.recognise(path, (_MARKERS,), _state_dict)


def read(path: Path) -> ForeignWeights:
    """:class:`ForeignWeights` of a super-gradients YOLO-NAS checkpoint (module docstring)."""
    sd = torchsave.read(path, _state_dict, holds_no="super-gradients YOLO-NAS state dict")
    return ForeignWeights(source=SOURCE, arch="yolo_nas", state_dict=sd, path=str(path),
                          licence="Deci YOLO-NAS weights licence (non-commercial; see super-gradients LICENSE.YOLONAS.md)")
