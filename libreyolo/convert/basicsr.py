"""Reader for BasicSR-style restoration checkpoints: NAFNet (megvii-research/NAFNet, MIT),
ESRGAN / Real-ESRGAN's RRDBNet generator (xinntao/Real-ESRGAN, BSD-3-Clause; BasicSR,
Apache-2.0) and SwinIR (JingyunLiang/SwinIR, Apache-2.0). A ``torch.save`` of
``{"params_ema": state_dict}``, ``{"params": state_dict}`` or a plain state dict, read with
``torch.load(weights_only=True)`` (no code runs); ``params_ema`` is preferred when both are
present, as Real-ESRGAN's inference does. ``arch`` is ``"swinir"``, ``"nafnet"`` or
``"rrdbnet"``, from the key names (the older ESRGAN spelling ``RRDB_trunk...`` is RRDBNet too).
"""

from __future__ import annotations

import zipfile
from pathlib import Path
from typing import Any

import torch

from ..errors import CheckpointError
from . import ForeignWeights

SOURCE = "basicsr"
# SwinIR first: its classical-SR layout has a conv_first and a conv_last too (the converter refuses it by name)
_ARCHS = {"swinir": ("conv_first.weight", "conv_after_body.weight", "patch_embed.norm.weight"),
          "nafnet": ("intro.weight", "ending.weight"), "rrdbnet": ("conv_first.weight", "conv_last.weight")}
_LICENCES = {"nafnet": "MIT (megvii-research/NAFNet weights)", "rrdbnet": "BSD-3-Clause (xinntao/Real-ESRGAN weights)",
             "swinir": "Apache-2.0 (JingyunLiang/SwinIR weights)"}


def _load(path: Path) -> Any:
    return torch.load(path, map_location="cpu", weights_only=True)


def arch_of(sd: Any) -> str | None:
    """``"swinir"`` / ``"nafnet"`` / ``"rrdbnet"`` for a state dict with those networks' marker keys,
    else ``None``.

    Example:
        >>> arch_of({"conv_first.weight": torch.zeros(1), "conv_last.weight": torch.zeros(1)})
        'rrdbnet'
    """
    if not isinstance(sd, dict):
        return None
    for arch, markers in _ARCHS.items():
        if all(m in sd for m in markers):
            return arch
    return None


def state_dict_of(obj: Any) -> dict[str, torch.Tensor] | None:
    """The state dict inside a BasicSR checkpoint object (``params_ema`` first), or ``None``."""
    if not isinstance(obj, dict) or "libreyolo" in obj:
        return None
    for key in ("params_ema", "params"):
        if isinstance(obj.get(key), dict):
            obj = obj[key]
            break
    if arch_of(obj) is not None and all(isinstance(v, torch.Tensor) for v in obj.values()):
        return obj
    return None


def recognise(path: Path) -> bool:
    """A ``torch.save`` archive holding a NAFNet, RRDBNet or SwinIR state dict (module docstring)."""
    if not zipfile.is_zipfile(path):
        return False
    try:  # a look at the pickle's bytes first (no tensor is read): its key names
        with zipfile.ZipFile(path) as z:
            pkl = [n for n in z.namelist() if n.endswith("data.pkl") and n.count("/") <= 1]
            head = z.read(pkl[0]) if pkl else b""
        if b"libreyolo" in head or not any(all(m.encode() in head for m in ms) for ms in _ARCHS.values()):
            return False
        return state_dict_of(_load(path)) is not None
    except Exception:  # noqa: BLE001 - unreadable here: not recognised, read_checkpoint says why
        return False


def read(path: Path) -> ForeignWeights:
    """:class:`ForeignWeights` of a BasicSR-style checkpoint (module docstring)."""
    try:
        sd = state_dict_of(_load(path))
    except Exception as e:  # noqa: BLE001 - every read failure becomes one sentence
        raise CheckpointError(f"'{path}' is not a readable checkpoint (truncated or corrupt: {type(e).__name__}); "
                              "use another copy or download it again.") from e
    if sd is None:
        raise CheckpointError(f"'{path}' holds no NAFNet or RRDBNet state dict.")
    arch = arch_of(sd) or ""
    return ForeignWeights(source=SOURCE, arch=arch, state_dict=dict(sd), path=str(path),
                          licence=_LICENCES.get(arch, ""))
