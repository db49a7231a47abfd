"""What the ``weights_only`` readers (:mod:`.yolox`, :mod:`.basicsr`, :mod:`.mmdet`,
:mod:`.super_gradients`) share: loading a ``torch.save`` archive without running code, and
recognising one by the key names in its pickle before any tensor is read."""

from __future__ import annotations

import zipfile
from collections.abc import Callable, Iterable
from pathlib import Path
from typing import Any

import torch

from ..errors import CheckpointError


def load(path: Path) -> Any:
    """``torch.load(path, weights_only=True)`` onto the CPU: tensors and plain values only."""
    return torch.load(path, map_location="cpu", weights_only=True)


def recognise(path: Path, markers: Iterable[Iterable[str]], state_dict_of: Callable[[Any], Any]) -> bool:
    """Whether ``path`` is a ``torch.save`` archive whose pickle names every key of one of the
    ``markers`` sets (a look at its bytes first: no tensor is read) and whose loaded object
    ``state_dict_of`` accepts (returns something other than ``None``). A libreyolo checkpoint is
    never recognised; an unreadable file is not recognised (``read_checkpoint`` says why).
    """
    if not zipfile.is_zipfile(path):
        return False
    try:
        with zipfile.ZipFile(path) as z:
            pkl = [n for n in z.namelist() if n.endswith("data.pkl") and n.count("/") <= 1]
            head = z.read(pkl[0]) if pkl else b""
        if b"libreyolo" in head or not any(all(m.encode() in head for m in ms) for ms in markers):
            return False
        return state_dict_of(load(path)) is not None
    except Exception:  # noqa: BLE001 - unreadable here: not recognised, read_checkpoint says why
        return False


def marked_state_dict(obj: Any, markers: Iterable[str], *, under: str = "state_dict") -> dict[str, torch.Tensor] | None:
    """The state dict in a loaded archive: ``obj[under]`` when ``obj`` has that key, else ``obj``
    itself, provided it is a dict of tensors holding every key of ``markers``; ``None`` otherwise
    (a libreyolo checkpoint among them).

    Example:
        >>> import torch
        >>> sd = {"a.weight": torch.zeros(1), "b.bias": torch.zeros(1)}
        >>> marked_state_dict({"meta": {}, "state_dict": sd}, ("a.weight",)) is sd
        True
        >>> marked_state_dict(sd, ("c.weight",)) is None
        True
    """
    if not isinstance(obj, dict) or "libreyolo" in obj:
        return None
    sd = obj.get(under, obj)
    if isinstance(sd, dict) and all(k in sd for k in markers) and all(isinstance(v, torch.Tensor) for v in sd.values()):
        return sd
    return None


def read(path: Path, found_in: Callable[[Any], Any], *, holds_no: str) -> Any:
    """``found_in(load(path))``: what a reader takes from the archive (a state dict, or a tuple
    holding one). A file that cannot be loaded, or whose loaded object yields ``None``, raises
    :class:`~libreyolo.errors.CheckpointError` in one sentence (``holds_no`` says what was looked for).
    """
    try:
        found = found_in(load(path))
    except Exception as e:  # noqa: BLE001 - every read failure becomes one sentence
        raise CheckpointError(f"'{path}' is not a readable checkpoint (truncated or corrupt: {type(e).__name__}); "
                              "use another copy or download it again.") from e
    if found is None:
        raise CheckpointError(f"'{path}' holds no {holds_no}.")
    return found
