"""Reader for timm / Hugging Face Hub classifier weights: a plain state dict in
``model.safetensors`` (or ``pytorch_model.bin`` / ``.pth``, read with ``weights_only=True``) with
the Hub's ``config.json`` beside it, whose ``"architecture"`` names the timm model
(``"resnet18"``, ``"convnext_atto"``, ...). timm's own ImageNet weights are mostly Apache-2.0;
check the model card of the weights you use.
"""

from __future__ import annotations

import json
from pathlib import Path

import torch

from ..errors import CheckpointError
from . import ForeignWeights

SOURCE = "timm"
_SUFFIXES = (".safetensors", ".bin", ".pth", ".pt")


def _config(path: Path) -> dict | None:
    cfg = path.with_name("config.json")
    if not cfg.is_file():
        return None
    try:
        data = json.loads(cfg.read_text())
    except (OSError, ValueError):
        return None
    if isinstance(data, dict) and isinstance(data.get("architecture"), str):
        return data
    return None


def recognise(path: Path) -> bool:
    """A weights file next to a timm ``config.json`` (one with an ``"architecture"`` string)."""
    if path.suffix not in _SUFFIXES or _config(path) is None:
        return False
    if path.suffix == ".safetensors":
        try:
            from safetensors import safe_open

            with safe_open(str(path), framework="pt") as f:
                return "libreyolo" not in (f.metadata() or {})
        except Exception:  # noqa: BLE001 - unreadable: not recognised here, read_checkpoint says why
            return False
    return True


def read(path: Path) -> ForeignWeights:
    """:class:`ForeignWeights` of a timm checkpoint (module docstring).

    Raises:
        CheckpointError: unreadable or truncated file, no config.json, not a state dict.
    """
    cfg = _config(path)
    if cfg is None:
        raise CheckpointError(f"'{path}' has no timm config.json beside it (with an \"architecture\" entry), so "
                              "its architecture is unknown; put the Hub's config.json next to it.")
    try:
        if path.suffix == ".safetensors":
            from safetensors.torch import load_file

            sd = load_file(str(path))
        else:
            sd = torch.load(path, map_location="cpu", weights_only=True)
    except Exception as e:  # noqa: BLE001 - every read failure becomes one sentence
        raise CheckpointError(f"'{path}' is not a readable weights file (truncated or corrupt: "
                              f"{type(e).__name__}); use another copy or download it again.") from e
    if isinstance(sd, dict) and "state_dict" in sd and isinstance(sd["state_dict"], dict):
        sd = sd["state_dict"]
    if not isinstance(sd, dict) or not sd or not all(isinstance(v, torch.Tensor) for v in sd.values()):
        raise CheckpointError(f"'{path}' is not a state dict of tensors, so it is not timm weights.")
    names = None
    labels = cfg.get("label_names") or (cfg.get("pretrained_cfg") or {}).get("label_names")
    if isinstance(labels, list):
        names = {i: str(n) for i, n in enumerate(labels)}
    return ForeignWeights(source=SOURCE, arch=cfg["architecture"], state_dict=dict(sd), path=str(path),
                          names=names, licence=str(cfg.get("license", "")),
                          extra={"num_classes": cfg.get("num_classes")})
