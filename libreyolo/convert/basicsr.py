"""Reader for BasicSR-style restoration checkpoints: NAFNet (megvii-research/NAFNet, MIT),
ESRGAN / Real-ESRGAN's RRDBNet generator (xinntao/Real-ESRGAN, BSD-3-Clause; BasicSR,
Apache-2.0) and SwinIR (JingyunLiang/SwinIR, Apache-2.0). A ``torch.save`` of
``{"params_ema": state_dict}``, ``{"params": state_dict}`` or a plain state dict, read with
``torch.load(weights_only=True)`` (no code runs); ``params_ema`` is preferred when both are
present, as Real-ESRGAN's inference does. ``arch`` is ``"swinir"``, ``"nafnet"`` or
``"rrdbnet"``, from the key names (the older ESRGAN spelling ``RRDB_trunk...`` is RRDBNet too).
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import torch

from . import ForeignWeights, torchsave

SOURCE = "basicsr"
# SwinIR first: its classical-SR layout has a conv_first and a conv_last too (the converter refuses it by name)
_ARCHS = {"swinir": ("conv_first.weight", "conv_after_body.weight", "patch_embed.norm.weight"),
          "nafnet": ("intro.weight", "ending.weight"), "rrdbnet": ("conv_first.weight", "conv_last.weight")}
_LICENCES = {"nafnet": "MIT (megvii-research/NAFNet weights)", "rrdbnet": "BSD-3-Clause (xinntao/Real-ESRGAN weights)",
             "swinir": "Apache-2.0 (JingyunLiang/SwinIR weights)"}


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
    return torchsave.recognise(path, _ARCHS.values(), state_dict_of)


def read(path: Path) -> ForeignWeights:
    """:class:`ForeignWeights` of a BasicSR-style checkpoint (module docstring)."""
    sd = torchsave.read(path, state_dict_of, holds_no="NAFNet or RRDBNet state dict")
    arch = arch_of(sd) or ""
    return ForeignWeights(source=SOURCE, arch=arch, state_dict=dict(sd), path=str(path),
                          licence=_LICENCES.get(arch, ""))
