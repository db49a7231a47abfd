"""Reader for timm / Hugging Face Hub classifier weights: a plain state dict in
``model.safetensors`` (or ``pytorch_model.bin`` / ``.pth``, read with ``weights_only=True``) with
the Hub's ``config.json`` beside it, whose ``"architecture"`` names the timm model
(``"resnet18"``, ``"convnext_atto"``, ...). timm's own ImageNet weights are mostly Apache-2.0;
check the model card of the weights you use.
"""

from __future__ import annotations

from pathlib import Path

from ..errors import CheckpointError
from . import ForeignWeights
from .hub_files import load_tensors, not_native, sibling_config

SOURCE = "timm"
_SUFFIXES = (".safetensors", ".bin", ".pth", ".pt")


def _config(path: Path) -> dict | None:
    return sibling_config(path, lambda d: isinstance(d.get("architecture"), str))


def recognise(path: Path) -> bool:
    """A weights file next to a timm ``config.json`` (one with an ``"architecture"`` string)."""
    return path.suffix in _SUFFIXES and _config(path) is not None and not_native(path)


def read(path: Path) -> ForeignWeights:
    """:class:`ForeignWeights` of a timm checkpoint (module docstring).

    Raises:
        CheckpointError: unreadable or truncated file, no config.json, not a state dict.
    """
    cfg = _config(path)
    if cfg is None:
        raise CheckpointError(f"'{path}' has no timm config.json beside it (with an \"architecture\" entry), so "
                              "its architecture is unknown; put the Hub's config.json next to it.")
    sd = load_tensors(path, source=SOURCE)
    names = None
    labels = cfg.get("label_names") or (cfg.get("pretrained_cfg") or {}).get("label_names")
    if isinstance(labels, list):
        names = {i: str(n) for i, n in enumerate(labels)}
    return ForeignWeights(source=SOURCE, arch=cfg["architecture"], state_dict=sd, path=str(path),
                          names=names, licence=str(cfg.get("license", "")),
                          extra={"num_classes": cfg.get("num_classes")})
