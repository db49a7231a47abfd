"""What the timm and transformers readers share: a weights file with a ``config.json`` beside it
(the Hugging Face Hub layout), read without unpickling code (``weights_only=True``)."""

from __future__ import annotations

import json
from collections.abc import Callable
from pathlib import Path

import torch

from ..errors import CheckpointError


def sibling_config(path: Path, accept: Callable[[dict], bool]) -> dict | None:
    """The ``config.json`` next to ``path`` when it parses and ``accept`` takes it, else None."""
    cfg = path.with_name("config.json")
    if not cfg.is_file():
        return None
    try:
        data = json.loads(cfg.read_text())
    except (OSError, ValueError):
        return None
    return data if isinstance(data, dict) and accept(data) else None


def not_native(path: Path) -> bool:
    """False for a ``.safetensors`` file libreyolo wrote itself (its metadata says so) or one that
    cannot be opened (``read_checkpoint`` then says why); True otherwise."""
    if path.suffix != ".safetensors":
        return True
    try:
        from safetensors import safe_open

        with safe_open(str(path), framework="pt") as f:
            return "libreyolo" not in (f.metadata() or {})
    except Exception:  # noqa: BLE001 - unreadable: not recognised here
        return False


def load_tensors(path: Path, *, source: str) -> dict[str, torch.Tensor]:
    """The state dict in ``path`` (safetensors, or a torch file read with ``weights_only=True``;
    a ``{"state_dict": ...}`` wrapper is opened); one-sentence :class:`CheckpointError` otherwise."""
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
        raise CheckpointError(f"'{path}' is not a state dict of tensors, so it is not {source} weights.")
    return dict(sd)
