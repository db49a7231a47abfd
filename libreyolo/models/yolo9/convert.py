"""Map a reference YOLOv9 state dict (``model.<i>.<...>`` keys) onto :class:`YOLO9Net`.

Two references share that key layout: the original GELAN / YOLOv9 code (``DDetect`` head) and
Ultralytics (``yolov9{t,s,m,c}.yaml``, ``Detect`` head). Backbone and neck are the same network
in both and in ours (``REFERENCE_LAYER_INDEX`` in :mod:`.nn` gives the layer each attribute is).
In the head ``cv2`` is our ``box`` branch, ``cv3`` our ``cls`` branch, and ``dfl.conv.weight``
(the constant ``arange(reg_max)`` projection) is dropped because decoding is postprocessing.
The key mapping is the lineage's (:mod:`libreyolo.models._gelan.convert`, layout ``YOLO9_LAYOUT``).

Known difference: Ultralytics' ``Detect`` box branch uses ungrouped convolutions (its second
3x3 conv and the final 1x1 conv have ``groups=1``), ours and the original ``DDetect`` use
``groups=4``. :func:`adapt_model` builds the head with ``box_groups=1`` when the checkpoint's box
kernels are ungrouped, so an Ultralytics checkpoint converts exactly (the option is saved in the
native checkpoint's metadata); converting onto a grouped head stops at
``model.22.cv2.0.1.conv.weight`` with a :class:`CheckpointError` that names the key.
"""

from __future__ import annotations

from collections.abc import Mapping

from torch import Tensor

from .._gelan import convert as _c
from .._gelan.variants import VARIANTS

LAYOUT = _c.YOLO9_LAYOUT
SOURCES = ("ultralytics",)


def rename_key(key: str) -> str | None:
    """Our name for one reference key, or ``None`` for a key we drop (DFL constant, counters).

    Example:
        >>> rename_key("model.22.cv2.0.2.weight"), rename_key("model.4.cv1.conv.weight")
        ('head.box.0.2.weight', 'elan3.cv1.conv.weight')
    """
    return _c.rename_key(key, LAYOUT)


def rename_state_dict(src: Mapping[str, Tensor]) -> dict[str, Tensor]:
    """All reference keys renamed (:func:`rename_key`), dropped ones left out; no shape checks."""
    return _c.rename_state_dict(src, LAYOUT)


def infer_size_nc(src: Mapping[str, Tensor]) -> tuple[str, int]:
    """``(size, nc)`` of a reference state dict, from the stem width, the first backbone ELAN's
    output width and the class conv's output channels."""
    return _c.infer_size_nc(src, VARIANTS, LAYOUT)


def convert_state_dict(src: Mapping[str, Tensor], own: Mapping[str, Tensor], *, arch: str = "") -> dict[str, Tensor]:
    """Reference state dict -> a state dict for a network whose ``state_dict()`` is ``own``
    (:func:`libreyolo.models._gelan.convert.convert_state_dict` with this family's layout)."""
    return _c.convert_state_dict(src, own, LAYOUT)


def match(fw: object) -> tuple[str, int] | None:
    """``(size, nc)`` when ``fw`` (:class:`~libreyolo.convert.ForeignWeights`) is a YOLOv9 (GELAN)
    detection checkpoint with the three-level ``Detect`` / ``DDetect`` head."""
    return _c.match_layout(fw, LAYOUT, VARIANTS, arch_prefixes=("yolov9", "gelan"))


def box_groups_of(src: Mapping[str, Tensor]) -> int:
    """4 when the reference box branch is grouped (original YOLOv9 ``DDetect``), 1 when not
    (Ultralytics ``Detect``): from the input channels of the second box conv of level 0."""
    return _c.box_groups_of(src, LAYOUT)


def adapt_model(model: object, fw: object) -> None:
    """Give ``model`` the head layout of ``fw``'s weights before they are converted onto it."""
    groups = box_groups_of(getattr(fw, "state_dict", {}))
    if groups != 4:
        model.set_arch(box_groups=groups)  # type: ignore[attr-defined]
