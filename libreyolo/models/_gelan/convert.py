"""Map a reference YOLOv9 state dict (``model.<i>.<...>`` keys) onto a :class:`~.net.YOLO9Net`.

Two references share that key layout: the original GELAN / YOLOv9 code (``DDetect`` head) and
Ultralytics (``yolov9{t,s,m,c}.yaml``, ``Detect`` head; ``v10Detect`` for the one-to-one head).
Backbone and neck are the same network in both and in ours. A :class:`Layout` says which layer
index each of our attributes is and how the head's submodules are named: in the plain head
``cv2`` is our ``box`` branch and ``cv3`` our ``cls`` branch; ``dfl.conv.weight`` (the constant
``arange(reg_max)`` projection) is dropped because decoding is postprocessing.

Known difference: Ultralytics' ``Detect`` box branch uses ungrouped convolutions (its second
3x3 conv and the final 1x1 conv have ``groups=1``), ours and the original ``DDetect`` use
``groups=4``. :func:`box_groups_of` tells them apart, so a family can build the ``box_groups=1``
head before converting; converting onto a grouped head stops at ``model.<head>.cv2.0.1.conv.weight``
with a :class:`CheckpointError` that names the key.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass

import torch
from torch import Tensor

from ...errors import CheckpointError
from .variants import YOLO9Variant

_DROP_SUFFIXES = ("num_batches_tracked",)


@dataclass(frozen=True, kw_only=True)
class Layout:
    """How one network of the lineage sits in the reference's ``model.<i>.`` numbering.

    layers: our attribute -> the reference layer index (the head included, as ``"head"``).
    head: the reference head submodule -> our head attribute path (``cv2`` -> ``box``).
    name: for messages (``"YOLOv9"``, ``"YOLOv9-P2"``...).
    """

    name: str
    layers: Mapping[str, int]
    head: Mapping[str, str]

    @property
    def head_index(self) -> int:
        return int(self.layers["head"])


_BACKBONE = {"stem1": 0, "stem2": 1, "p2": 2, "down3": 3, "elan3": 4, "down4": 5, "elan4": 6, "down5": 7,
             "elan5": 8, "spp": 9, "top4": 12, "top3": 15}
_PLAIN_HEAD = {"cv2": "box", "cv3": "cls"}

#: three levels (yolov9{t,s,m,c}.yaml, gelan-*.yaml)
YOLO9_LAYOUT = Layout(name="YOLOv9", head=_PLAIN_HEAD, layers={
    **_BACKBONE, "bottom4_down": 16, "bottom4": 18, "bottom5_down": 19, "bottom5": 21, "head": 22})
#: four levels: the stride-4 extension inserted after layer 15 (as yolov8-p2.yaml extends yolov8)
P2_LAYOUT = Layout(name="YOLOv9-P2", head=_PLAIN_HEAD, layers={
    **_BACKBONE, "top2": 18, "bottom3_down": 19, "bottom3": 21, "bottom4_down": 22, "bottom4": 24,
    "bottom5_down": 25, "bottom5": 27, "head": 28})
#: three levels, Ultralytics' ``v10Detect`` head: one-to-many ``cv2``/``cv3``, one-to-one copies
E2E_LAYOUT = Layout(name="YOLOv9 end-to-end", layers=YOLO9_LAYOUT.layers, head={
    "cv2": "o2m.box", "cv3": "o2m.cls", "one2one_cv2": "o2o.box", "one2one_cv3": "o2o.cls"})


#: three levels, Ultralytics' ``Segment`` head: ``Detect``'s branches plus the mask coefficients
#: (``cv4``) and the prototypes (``proto``)
SEG_LAYOUT = Layout(name="YOLOv9-seg", layers=YOLO9_LAYOUT.layers, head={
    **_PLAIN_HEAD, "cv4": "coef", "proto": "proto"})

#: three levels, Ultralytics' ``Pose`` head: ``Detect``'s branches plus the keypoints (``cv4``)
POSE_LAYOUT = Layout(name="YOLOv9-pose", layers=YOLO9_LAYOUT.layers, head={**_PLAIN_HEAD, "cv4": "kpt"})


def rename_key(key: str, layout: Layout = YOLO9_LAYOUT) -> str | None:
    """Our name for one reference key, or ``None`` for a key we drop (DFL constant, counters).

    Example:
        >>> rename_key("model.22.cv2.0.2.weight"), rename_key("model.4.cv1.conv.weight")
        ('head.box.0.2.weight', 'elan3.cv1.conv.weight')
        >>> rename_key("model.22.one2one_cv3.1.0.conv.weight", E2E_LAYOUT)
        'head.o2o.cls.1.0.conv.weight'
    """
    index_to_attr = {i: name for name, i in layout.layers.items()}
    parts = key.split(".")
    if parts[0] == "model":
        parts = parts[1:]
    if not parts or not parts[0].isdigit():
        raise CheckpointError(f"reference key {key!r} is not of the form model.<layer>.<...>, so this is "
                              f"not a {layout.name} state dict.")
    idx, rest = int(parts[0]), parts[1:]
    if key.endswith(_DROP_SUFFIXES):
        return None
    if idx not in index_to_attr:
        raise CheckpointError(f"reference key {key!r} belongs to layer {idx}, which a {layout.name} (GELAN) "
                              "network of this layout does not have (an auxiliary branch, or another model).")
    if idx == layout.head_index:
        if rest[:1] == ["dfl"]:
            return None
        branch = layout.head.get(rest[0]) if rest else None
        if branch is None:
            raise CheckpointError(f"reference head key {key!r} is none of the head branches "
                                  f"{', '.join(layout.head)} of {layout.name}; this head layout is not supported.")
        rest = [branch, *rest[1:]]
    return ".".join([index_to_attr[idx], *rest])


def rename_state_dict(src: Mapping[str, Tensor], layout: Layout = YOLO9_LAYOUT) -> dict[str, Tensor]:
    """All reference keys renamed (:func:`rename_key`), dropped ones left out; no shape checks."""
    out: dict[str, Tensor] = {}
    for k, v in src.items():
        new = rename_key(k, layout)
        if new is not None:
            out[new] = v
    return out


def _get(src: Mapping[str, Tensor], key: str) -> Tensor:
    for k in (f"model.{key}", key):
        if k in src:
            return src[k]
    raise CheckpointError(f"this is not a YOLOv9 (GELAN) state dict: it has no {key!r} tensor.")


def infer_size_nc(src: Mapping[str, Tensor], variants: Mapping[str, YOLO9Variant],
                  layout: Layout = YOLO9_LAYOUT) -> tuple[str, int]:
    """``(size, nc)`` of a reference state dict, from the stem width, the first backbone ELAN's
    output width and the class conv's output channels (of the first head branch for classes)."""
    stem = int(_get(src, "0.conv.weight").shape[0])
    elan3 = int(_get(src, "4.cv4.conv.weight").shape[0])
    cls_branch = next(k for k, v in layout.head.items() if v.endswith("cls"))
    last = _get(src, f"{layout.head_index}.{cls_branch}.0.2.weight")
    nc = int(last.shape[0])
    for size, v in variants.items():
        if v.stem[0] == stem and v.backbone[0][0] == elan3:
            return size, nc
    raise CheckpointError(f"this {layout.name} state dict (stem {stem}, first ELAN {elan3} channels wide) matches "
                          f"none of the sizes {', '.join(variants)}.")


def convert_state_dict(src: Mapping[str, Tensor], own: Mapping[str, Tensor],
                       layout: Layout = YOLO9_LAYOUT) -> dict[str, Tensor]:
    """Reference state dict -> a state dict for a network whose ``state_dict()`` is ``own``.

    Every target tensor must be filled by exactly one reference tensor of the same shape.

    Raises:
        CheckpointError: naming the first reference key that does not fit (unknown, or of
            another shape than ours), or the first of ours that nothing filled.
    """
    out: dict[str, Tensor] = {}
    for k, v in src.items():
        new = rename_key(k, layout)
        if new is None:
            continue
        if new not in own:
            raise CheckpointError(f"reference key {k!r} (ours would be {new!r}) has no place in this network.")
        if tuple(own[new].shape) != tuple(v.shape):
            hint = ""
            if ".box." in f".{new}" and v.dim() == 4 and v.shape[1] != own[new].shape[1]:
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


def _has(sd: Mapping[str, Tensor], key: str) -> bool:
    return f"model.{key}" in sd or key in sd


def layout_of(sd: Mapping[str, Tensor]) -> Layout | None:
    """Which network of the lineage a reference state dict is, from its layer layout: the GELAN
    blocks at layers 2..8 and where the head sits and what it holds; ``None`` for none of them.

    Example:
        >>> layout_of({}) is None
        True
    """
    gelan = _has(sd, "4.cv4.conv.weight") and any(
        k.startswith(("model.4.cv2.0.m.0.cv1.conv1.", "4.cv2.0.m.0.cv1.conv1.")) for k in sd)
    if not gelan:
        return None
    if _has(sd, "28.cv3.0.2.weight") and _has(sd, "18.cv4.conv.weight"):
        return P2_LAYOUT
    if _has(sd, "22.one2one_cv3.0.2.weight"):
        return E2E_LAYOUT
    if _has(sd, "22.proto.cv1.conv.weight"):
        return SEG_LAYOUT
    if _has(sd, "22.cv4.0.2.weight"):  # a fourth branch without prototypes: keypoints
        return POSE_LAYOUT
    if _has(sd, "22.cv3.0.2.weight"):
        return YOLO9_LAYOUT
    return None


def box_groups_of(src: Mapping[str, Tensor], layout: Layout = YOLO9_LAYOUT) -> int:
    """4 when the reference box branch is grouped (original YOLOv9 ``DDetect``), 1 when not
    (Ultralytics ``Detect``): from the input channels of the second box conv of level 0."""
    h = layout.head_index
    w = src.get(f"model.{h}.cv2.0.1.conv.weight", src.get(f"{h}.cv2.0.1.conv.weight"))
    first = src.get(f"model.{h}.cv2.0.0.conv.weight", src.get(f"{h}.cv2.0.0.conv.weight"))
    if w is None or first is None:
        return 4
    return 1 if int(w.shape[1]) == int(first.shape[0]) else 4


def match_layout(fw: object, layout: Layout, variants: Mapping[str, YOLO9Variant], *,
                 arch_prefixes: tuple[str, ...] = ()) -> tuple[str, int] | None:
    """``(size, nc)`` when ``fw`` (:class:`~libreyolo.convert.ForeignWeights`) holds the network of
    ``layout``; ``None`` when it is another model. A checkpoint whose architecture name starts
    with one of ``arch_prefixes`` but has no GELAN layout at all raises (a damaged file)."""
    sd = getattr(fw, "state_dict", {})
    arch = str(getattr(fw, "arch", "")).lower()
    found = layout_of(sd)
    if found is None:
        if arch_prefixes and arch.startswith(arch_prefixes):
            raise CheckpointError(f"checkpoint says it is {arch!r} but does not have the GELAN layer layout.")
        return None
    if found is not layout:
        return None
    return infer_size_nc(sd, variants, layout)
