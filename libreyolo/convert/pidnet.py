"""Reader for the PIDNet reference implementation's checkpoints (XuJiacong/PIDNet): the trained
``PIDNet_S_Cityscapes_*.pt`` / ``PIDNet_S_Camvid_*.pt`` files are a ``torch.save`` of the training
wrapper's state dict (keys under ``model.``, the loss's buffers under ``loss.``); the ImageNet
backbone files hold it under ``"state_dict"``. Read with ``torch.load(weights_only=True)`` (no code
runs); the names are mapped by :mod:`libreyolo.models.pidnet.convert`. Facts from the reference's
``models/pidnet.py`` (module names) and ``tools/train.py`` (``best.pt`` / ``final_state.pt`` are
``torch.save(model.module.state_dict())`` of the ``FullModel`` wrapper, which holds the network as
``model`` and the losses; ``checkpoint.pth.tar`` has the same under ``"state_dict"`` beside the
optimiser). The files carry no licence; the reference repository's terms apply.
"""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any

import torch

from . import ForeignWeights, torchsave

SOURCE = "pidnet"
# in the pickle's bytes (recognise) and, after the wrapper prefix, in the state dict (read)
_MARKERS = ("dfm.conv_p.0.weight", "final_layer.conv2.weight")
_PREFIX = re.compile(r"^(module\.)?(model\.)?")


def _state_dict(obj: Any) -> dict[str, torch.Tensor] | None:
    """The reference state dict in a loaded archive (alone or under ``"state_dict"``), else None."""
    if not isinstance(obj, dict) or "libreyolo" in obj:
        return None
    sd = obj.get("state_dict", obj)
    if not isinstance(sd, dict) or not sd or not all(isinstance(v, torch.Tensor) for v in sd.values()):
        return None
    bare = {_PREFIX.sub("", k) for k in sd}
    return sd if all(m in bare for m in _MARKERS) else None


def recognise(path: Path) -> bool:
    """A ``torch.save`` archive holding a PIDNet reference state dict."""
    return torchsave.recognise(path, (_MARKERS,), _state_dict)


def read(path: Path) -> ForeignWeights:
    """:class:`ForeignWeights` of a PIDNet reference checkpoint (module docstring)."""
    sd = torchsave.read(path, _state_dict, holds_no=f"PIDNet state dict (no {' / '.join(_MARKERS)})")
    return ForeignWeights(source=SOURCE, arch="pidnet", state_dict=dict(sd), path=str(path),
                          licence="the XuJiacong/PIDNet repository's terms (not stated in the file)")
