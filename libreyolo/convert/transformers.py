"""Reader for Hugging Face ``transformers`` detector weights: ``model.safetensors`` (or
``pytorch_model.bin``, read with ``weights_only=True``) with its ``config.json`` beside it, whose
``"model_type"`` names the architecture (``"rt_detr"``, ...). The official RT-DETR weights are
Apache-2.0; check the model card of the weights you use.
"""

from __future__ import annotations

from pathlib import Path

from ..errors import CheckpointError
from . import ForeignWeights
from .hub_files import load_tensors, not_native, sibling_config

SOURCE = "transformers"
_SUFFIXES = (".safetensors", ".bin")


def _config(path: Path) -> dict | None:
    return sibling_config(path, lambda d: isinstance(d.get("model_type"), str) and "architecture" not in d)


def recognise(path: Path) -> bool:
    """A weights file next to a transformers ``config.json`` (one with a ``"model_type"``)."""
    return path.suffix in _SUFFIXES and _config(path) is not None and not_native(path)


def read(path: Path) -> ForeignWeights:
    """:class:`ForeignWeights` of a transformers checkpoint (module docstring).

    Raises:
        CheckpointError: unreadable or truncated file, no config.json, not a state dict.
    """
    cfg = _config(path)
    if cfg is None:
        raise CheckpointError(f"'{path}' has no transformers config.json beside it (with a \"model_type\" "
                              "entry), so its architecture is unknown; put the Hub's config.json next to it.")
    sd = load_tensors(path, source=SOURCE)
    names = None
    id2label = cfg.get("id2label")
    if isinstance(id2label, dict):
        try:
            names = {int(k): str(v) for k, v in id2label.items()}
        except ValueError:
            names = None
    return ForeignWeights(source=SOURCE, arch=cfg["model_type"], state_dict=sd, path=str(path),
                          names=names, licence="", extra={"architectures": cfg.get("architectures")})
