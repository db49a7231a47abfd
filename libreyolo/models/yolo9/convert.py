"""Map a reference YOLOv9 state dict (``model.<i>.<...>`` keys) onto :class:`YOLO9Net`.

Two references share that key layout: the original GELAN / YOLOv9 code (``DDetect`` head) and
Ultralytics (``yolov9{t,s,m,c}.yaml``, ``Detect`` head). Backbone and neck are the same network
in both and in ours (``REFERENCE_LAYER_INDEX`` in :mod:`.nn` gives the layer each attribute is).
In the head ``cv2`` is our ``box`` branch, ``cv3`` our ``cls`` branch, and ``dfl.conv.weight``
(the constant ``arange(reg_max)`` projection) is dropped because decoding is postprocessing.

Known difference: Ultralytics' ``Detect`` box branch uses ungrouped convolutions (its second
3x3 conv and the final 1x1 conv have ``groups=1``), ours and the original ``DDetect`` use
``groups=4``. :func:`adapt_model` builds the head with ``box_groups=1`` when the checkpoint's box
kernels are ungrouped, so an Ultralytics checkpoint converts exactly (the option is saved in the
native checkpoint's metadata); converting onto a grouped head stops at
``model.22.cv2.0.1.conv.weight`` with a :class:`CheckpointError` that names the key.
"""

from __future__ import annotations

from collections.abc import Mapping

import torch
from torch import Tensor

from ...errors import CheckpointError
from .nn import REFERENCE_LAYER_INDEX
from .variants import VARIANTS

_INDEX_TO_ATTR = {i: name for name, i in REFERENCE_LAYER_INDEX.items()}
_HEAD = REFERENCE_LAYER_INDEX["head"]
_DROP_SUFFIXES = ("num_batches_tracked",)


def rename_key(key: str) -> str | None:
    """Our name for one reference key, or ``None`` for a key we drop (DFL constant, counters).

    Example:
        >>> rename_key("model.22.cv2.0.2.weight"), rename_key("model.4.cv1.conv.weight")
        ('head.box.0.2.weight', 'elan3.cv1.conv.weight')
    """
    parts = key.split(".")
    if parts[0] == "model":
        parts = parts[1:]
    if not parts or not parts[0].isdigit():
        raise CheckpointError(f"reference key {key!r} is not of the form model.<layer>.<...>, so this is "
                              "not a YOLOv9 state dict.")
    idx, rest = int(parts[0]), parts[1:]
    if key.endswith(_DROP_SUFFIXES):
        return None
    if idx not in _INDEX_TO_ATTR:
        raise CheckpointError(f"reference key {key!r} belongs to layer {idx}, which a YOLOv9 (GELAN) "
                              "network of this layout does not have (an auxiliary branch, or another model).")
    if idx == _HEAD:
        if rest[:1] == ["dfl"]:
            return None
        branch = {"cv2": "box", "cv3": "cls"}.get(rest[0]) if rest else None
        if branch is None:
            raise CheckpointError(f"reference head key {key!r} is neither a box (cv2), class (cv3) nor DFL "
                                  "tensor; this head layout is not supported.")
        rest = [branch, *rest[1:]]
    return ".".join([_INDEX_TO_ATTR[idx], *rest])


def rename_state_dict(src: Mapping[str, Tensor]) -> dict[str, Tensor]:
    """All reference keys renamed (:func:`rename_key`), dropped ones left out; no shape checks."""
    out: dict[str, Tensor] = {}
    for k, v in src.items():
        new = rename_key(k)
        if new is not None:
            out[new] = v
    return out


def infer_size_nc(src: Mapping[str, Tensor]) -> tuple[str, int]:
    """``(size, nc)`` of a reference state dict, from the stem width, the first backbone ELAN's
    output width and the class conv's output channels."""
    def get(key: str) -> Tensor:
        for k in (f"model.{key}", key):
            if k in src:
                return src[k]
        raise CheckpointError(f"this is not a YOLOv9 (GELAN) state dict: it has no {key!r} tensor.")

    stem = int(get("0.conv.weight").shape[0])
    elan3 = int(get("4.cv4.conv.weight").shape[0])
    nc = int(get(f"{_HEAD}.cv3.0.2.weight").shape[0])
    for size, v in VARIANTS.items():
        if v.stem[0] == stem and v.backbone[0][0] == elan3:
            return size, nc
    raise CheckpointError(f"this YOLOv9 state dict (stem {stem}, first ELAN {elan3} channels wide) matches none "
                          f"of the sizes {', '.join(VARIANTS)}.")


def convert_state_dict(src: Mapping[str, Tensor], own: Mapping[str, Tensor], *, arch: str = "") -> dict[str, Tensor]:
    """Reference state dict -> a state dict for a network whose ``state_dict()`` is ``own``.

    Every target tensor must be filled by exactly one reference tensor of the same shape.

    Raises:
        CheckpointError: naming the first reference key that does not fit (unknown, or of
            another shape than ours), or the first of ours that nothing filled.
    """
    out: dict[str, Tensor] = {}
    for k, v in src.items():
        new = rename_key(k)
        if new is None:
            continue
        if new not in own:
            raise CheckpointError(f"reference key {k!r} (ours would be {new!r}) has no place in this network.")
        if tuple(own[new].shape) != tuple(v.shape):
            hint = ""
            if new.startswith("head.box.") and v.dim() == 4 and v.shape[1] != own[new].shape[1]:
                hint = (" (the reference box branch uses ungrouped convolutions, ours groups=4 as in the "
                        "original YOLOv9 DDetect head: an Ultralytics YOLOv9 head cannot be converted exactly)")
            raise CheckpointError(f"reference key {k!r} has shape {tuple(v.shape)}, ours {new!r} has "
                                  f"{tuple(own[new].shape)}{hint}.")
        out[new] = v.detach().to(own[new].dtype) if v.is_floating_point() else v.detach()
    missing = [k for k in own if k not in out and not k.endswith(_DROP_SUFFIXES)]
    if missing:
        raise CheckpointError(f"the reference state dict has nothing for {missing[0]!r} "
                              f"({len(missing)} of our tensors unfilled).")
    for k in own:
        if k.endswith(_DROP_SUFFIXES) and k not in out:
            out[k] = torch.zeros_like(own[k])
    return out


SOURCES = ("ultralytics",)


def match(fw: object) -> tuple[str, int] | None:
    """``(size, nc)`` when ``fw`` (:class:`~libreyolo.convert.ForeignWeights`) is a YOLOv9 (GELAN)
    detection checkpoint: its layers 2..21 are the GELAN ELAN/ADown/AConv blocks."""
    sd = getattr(fw, "state_dict", {})
    arch = str(getattr(fw, "arch", "")).lower()
    gelan = "model.4.cv4.conv.weight" in sd and "model.22.cv3.0.2.weight" in sd and any(
        k.startswith("model.4.cv2.0.m.0.cv1.conv1.") for k in sd)
    if not gelan and not arch.startswith(("yolov9", "gelan")):
        return None
    if not gelan:
        raise CheckpointError(f"checkpoint says it is {arch!r} but does not have the GELAN layer layout.")
    return infer_size_nc(sd)


def box_groups_of(src: Mapping[str, Tensor]) -> int:
    """4 when the reference box branch is grouped (original YOLOv9 ``DDetect``), 1 when not
    (Ultralytics ``Detect``): from the input channels of the second box conv of level 0."""
    w = src.get(f"model.{_HEAD}.cv2.0.1.conv.weight", src.get(f"{_HEAD}.cv2.0.1.conv.weight"))
    first = src.get(f"model.{_HEAD}.cv2.0.0.conv.weight", src.get(f"{_HEAD}.cv2.0.0.conv.weight"))
    if w is None or first is None:
        return 4
    return 1 if int(w.shape[1]) == int(first.shape[0]) else 4


def adapt_model(model: object, fw: object) -> None:
    """Give ``model`` the head layout of ``fw``'s weights before they are converted onto it."""
    groups = box_groups_of(getattr(fw, "state_dict", {}))
    if groups != 4:
        model.set_arch(box_groups=groups)  # type: ignore[attr-defined]
