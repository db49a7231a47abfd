"""Reader for BiRefNet checkpoints (ZhengPeng7/BiRefNet): the official repository's ``.pth`` (a
``torch.save`` of the network's state dict, ``module.`` / ``_orig_mod.`` prefixes allowed) and the
Hugging Face ``model.safetensors`` (the same keys; its ``config.json`` is not needed). A file is
recognised by its key names alone (the Swin backbone ``bb.patch_embed.proj.weight``, the
``squeeze_module.`` and the ``decoder.`` blocks), before any tensor is read for ``.safetensors``;
``.pth`` files are read with ``weights_only=True`` (no code runs). The released weights are MIT.
The mapping onto our network and the size (from the backbone width) are in
:mod:`libreyolo.models.birefnet.convert`.
"""

from __future__ import annotations

import re
from collections.abc import Iterable
from pathlib import Path
from typing import Any

import torch

from . import ForeignWeights, torchsave
from .hub_files import load_tensors, not_native

SOURCE = "birefnet"
_SUFFIXES = (".pth", ".pt", ".bin", ".safetensors")
_PREFIX = re.compile(r"^(module\.|_orig_mod\.)+")
_MARKERS = ("bb.patch_embed.proj.weight", "squeeze_module.", "decoder.")


def _is_birefnet(keys: Iterable[str]) -> bool:
    seen = {_PREFIX.sub("", k) for k in keys}
    return ("bb.patch_embed.proj.weight" in seen and any(k.startswith("squeeze_module.") for k in seen)
            and any(k.startswith("decoder.") for k in seen))


def _state_dict(obj: Any) -> dict[str, torch.Tensor] | None:
    if not isinstance(obj, dict) or "libreyolo" in obj:
        return None
    sd = obj.get("state_dict", obj)
    if isinstance(sd, dict) and sd and all(isinstance(v, torch.Tensor) for v in sd.values()) and _is_birefnet(sd):
        return sd
    return None


def recognise(path: Path) -> bool:
    """A state dict with BiRefNet's key names, in a ``.safetensors`` file (not one libreyolo wrote)
    or a ``torch.save`` archive."""
    if path.suffix not in _SUFFIXES:
        return False
    if path.suffix == ".safetensors":
        if not not_native(path):
            return False
        try:
            from safetensors import safe_open

            with safe_open(str(path), framework="pt") as f:
                return _is_birefnet(f.keys())
        except Exception:  # noqa: BLE001 - unreadable: not recognised here
            return False
    return torchsave.recognise(path, (_MARKERS,), _state_dict)


def read(path: Path) -> ForeignWeights:
    """:class:`ForeignWeights` of a BiRefNet checkpoint (``arch`` ``"birefnet"``).

    Raises:
        CheckpointError: unreadable file, not a state dict of tensors.
    """
    sd = load_tensors(path, source="BiRefNet")
    return ForeignWeights(source=SOURCE, arch="birefnet", state_dict=sd, path=str(path),
                          licence="MIT (ZhengPeng7/BiRefNet weights)")
