"""Reader for DINOv2's linear segmentation heads (facebookresearch/dinov2, Apache-2.0):
``dinov2_vit{s,b,l}14_<dataset>_{linear,ms}_head.pth``, an mmsegmentation ``torch.save`` of
``{"meta": ..., "state_dict": {"decode_head.bn.*", "decode_head.conv_seg.*"}}``, read with
``torch.load(weights_only=True)``.

A head file holds no trunk: the trunk comes from the backbone file published beside it,
``dinov2_vit{s,b,l}14_pretrain.pth`` in the same folder (its name is derived from the head's), and
the two state dicts are merged. A file that holds both (an mmsegmentation whole model, trunk under
``backbone.``) is read alone. Class names come from the checkpoint's meta when it has them.
"""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any

import torch

from ..errors import CheckpointError
from . import ForeignWeights, torchsave

SOURCE = "dinov2_seg"
_MARKERS = ("decode_head.bn.weight", "decode_head.conv_seg.weight")
_HEAD_NAME = re.compile(r"(dinov2_vit[sbl]14)_.*_head\.pth")


def _state_dict(obj: Any) -> dict[str, torch.Tensor] | None:
    return torchsave.marked_state_dict(obj, _MARKERS)


def _load(path: Path) -> Any:
    try:
        return torchsave.load(path)
    except Exception as e:  # noqa: BLE001 - every read failure becomes one sentence
        raise CheckpointError(f"'{path}' is not a readable checkpoint (truncated, corrupt, or holding objects other "
                              f"than tensors and plain values: {type(e).__name__}).") from e


def backbone_path(head: Path) -> Path:
    """Where the trunk of a published head file lies: ``dinov2_vits14_pretrain.pth`` beside
    ``dinov2_vits14_ade20k_linear_head.pth`` (module docstring).

    Example:
        >>> backbone_path(Path("w/dinov2_vitb14_voc2012_ms_head.pth")).as_posix()
        'w/dinov2_vitb14_pretrain.pth'
    """
    m = _HEAD_NAME.fullmatch(head.name)
    if m is None:
        raise CheckpointError(f"'{head}' holds a DINOv2 segmentation head but no trunk, and its name is not a "
                              "published head's (dinov2_vit<s|b|l>14_<dataset>_<linear|ms>_head.pth), so the "
                              "trunk file beside it cannot be named; merge the two state dicts into one file.")
    return head.with_name(f"{m.group(1)}_pretrain.pth")


def recognise(path: Path) -> bool:
    """A ``torch.save`` archive holding a DINOv2 linear segmentation head (alone or under ``"state_dict"``)."""
    return torchsave.recognise(path, (_MARKERS,), _state_dict)


def read(path: Path) -> ForeignWeights:
    """:class:`ForeignWeights` of a head file merged with its trunk (module docstring)."""
    obj = _load(path)
    sd = _state_dict(obj)
    if sd is None:
        raise CheckpointError(f"'{path}' holds no DINOv2 segmentation head (decode_head.bn / decode_head.conv_seg).")
    sd = dict(sd)
    if not any(k.removeprefix("backbone.") == "cls_token" for k in sd):
        trunk_file = backbone_path(path)
        if not trunk_file.is_file():
            raise CheckpointError(f"'{path}' is a DINOv2 segmentation head without its trunk: put the backbone "
                                  f"'{trunk_file.name}' beside it (published with the head).")
        trunk = _load(trunk_file)
        trunk = trunk.get("model", trunk) if isinstance(trunk, dict) else trunk
        if not isinstance(trunk, dict) or "cls_token" not in trunk:
            raise CheckpointError(f"'{trunk_file}' is not a DINOv2 trunk state dict (no cls_token).")
        sd.update(trunk)
    names = None
    meta = obj.get("meta") if isinstance(obj, dict) else None
    classes = None
    if isinstance(meta, dict):
        classes = meta.get("CLASSES", meta.get("dataset_meta", {}).get("classes") if isinstance(
            meta.get("dataset_meta"), dict) else None)
    if isinstance(classes, (list, tuple)) and all(isinstance(c, str) for c in classes):
        names = dict(enumerate(classes))
    m = _HEAD_NAME.fullmatch(path.name)
    return ForeignWeights(source=SOURCE, arch=m.group(1) if m else "dinov2_seg", state_dict=sd, path=str(path),
                          names=names, licence="Apache-2.0 (DINOv2 weights and heads)")
