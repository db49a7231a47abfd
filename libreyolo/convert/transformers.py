"""Reader for Hugging Face ``transformers`` detector weights: ``model.safetensors`` (or
``pytorch_model.bin``, read with ``weights_only=True``) with its ``config.json`` beside it, whose
``"model_type"`` names the architecture (``"rt_detr"``, ...). The official RT-DETR weights are
Apache-2.0; check the model card of the weights you use.
"""

from __future__ import annotations

import json
from pathlib import Path

import torch

from ..errors import CheckpointError
from . import ForeignWeights

SOURCE = "transformers"
_SUFFIXES = (".safetensors", ".bin")


def _config(path: Path) -> dict | None:
    cfg = path.with_name("config.json")
    if not cfg.is_file():
        return None
    try:
        data = json.loads(cfg.read_text())
    except (OSError, ValueError):
        return None
    if isinstance(data, dict) and isinstance(data.get("model_type"), str) and "architecture" not in data:
        return data
    return None


def recognise(path: Path) -> bool:
    """A weights file next to a transformers ``config.json`` (one with a ``"model_type"``)."""
    if path.suffix not in _SUFFIXES or _config(path) is None:
        return False
    if path.suffix == ".safetensors":
        try:
            from safetensors import safe_open

            with safe_open(str(path), framework="pt") as f:
                return "libreyolo" not in (f.metadata() or {})
        except Exception:  # noqa: BLE001 - unreadable: not recognised, read_checkpoint says why
            return False
    return True


def read(path: Path) -> ForeignWeights:
    """:class:`ForeignWeights` of a transformers checkpoint (module docstring).

    Raises:
        CheckpointError: unreadable or truncated file, no config.json, not a state dict.
    """
    cfg = _config(path)
    if cfg is None:
        raise CheckpointError(f"'{path}' has no transformers config.json beside it (with a \"model_type\" "
                              "entry), so its architecture is unknown; put the Hub's config.json next to it.")
    try:
        if path.suffix == ".safetensors":
            from safetensors.torch import load_file

            sd = load_file(str(path))
        else:
            sd = torch.load(path, map_location="cpu", weights_only=True)
    except Exception as e:  # noqa: BLE001 - every read failure becomes one sentence
        raise CheckpointError(f"'{path}' is not a readable weights file (truncated or corrupt: "
                              f"{type(e).__name__}); use another copy or download it again.") from e
    if not isinstance(sd, dict) or not sd or not all(isinstance(v, torch.Tensor) for v in sd.values()):
        raise CheckpointError(f"'{path}' is not a state dict of tensors, so it is not transformers weights.")
    names = None
    id2label = cfg.get("id2label")
    if isinstance(id2label, dict):
        try:
            names = {int(k): str(v) for k, v in id2label.items()}
        except ValueError:
            names = None
    return ForeignWeights(source=SOURCE, arch=cfg["model_type"], state_dict=dict(sd), path=str(path),
                          names=names, licence="", extra={"architectures": cfg.get("architectures")})
