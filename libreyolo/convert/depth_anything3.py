"""Reader for the Depth Anything 3 reference's weights (the ``depth_anything_3`` package's Hub
layout): ``model.safetensors`` (or a ``.bin`` / ``.pt`` / ``.pth`` state dict, read with
``weights_only=True``) with a ``config.json`` beside it whose ``"model_name"`` starts with ``da3``
(``da3-small``, ``da3mono-large``, ...). DA3-Small / Base and DA3Mono / Metric-Large are Apache-2.0;
Large / Giant / Nested are CC-BY-NC-4.0: check the model card of the weights you use.
"""

from __future__ import annotations

from pathlib import Path

from ..errors import CheckpointError
from . import ForeignWeights
from .hub_files import load_tensors, not_native, sibling_config

SOURCE = "depth_anything_3"
_SUFFIXES = (".safetensors", ".bin", ".pt", ".pth")


def _config(path: Path) -> dict | None:
    return sibling_config(path, lambda d: str(d.get("model_name", "")).lower().startswith("da3"))


def recognise(path: Path) -> bool:
    """A weights file next to a ``config.json`` with a ``"model_name"`` of ``da3...``."""
    return path.suffix in _SUFFIXES and _config(path) is not None and not_native(path)


def read(path: Path) -> ForeignWeights:
    """:class:`ForeignWeights` of a Depth Anything 3 checkpoint (``arch`` = the model name).

    Raises:
        CheckpointError: no such config.json beside it, unreadable file, not a state dict.
    """
    cfg = _config(path)
    if cfg is None:
        raise CheckpointError(f"'{path}' has no Depth Anything 3 config.json beside it (with a \"model_name\" "
                              "such as \"da3-small\"); put the Hub's config.json next to it.")
    sd = load_tensors(path, source="Depth Anything 3")
    return ForeignWeights(source=SOURCE, arch=str(cfg["model_name"]).lower(), state_dict=sd, path=str(path))
