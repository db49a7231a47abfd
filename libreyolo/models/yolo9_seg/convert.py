"""Map an Ultralytics YOLOv9-seg state dict (``model.<i>.<...>`` keys) onto the ``yolo9_seg``
network: ``yolov9c-seg.yaml`` checkpoints, or a YOLOv9-t/s built with the ``Segment`` head.

Backbone and neck keys as in :mod:`libreyolo.models.yolo9.convert`; the head (layer 22, layout
``SEG_LAYOUT`` of :mod:`libreyolo.models._gelan.convert`) maps ``cv2`` / ``cv3`` / ``cv4`` /
``proto`` to our ``box`` / ``cls`` / ``coef`` / ``proto``. Ultralytics' box branch is ungrouped, so
:func:`adapt_model` builds the ``box_groups=1`` head first.
"""

from __future__ import annotations

from collections.abc import Mapping

from torch import Tensor

from .._gelan import convert as _c
from .nn import VARIANTS

LAYOUT = _c.SEG_LAYOUT
SOURCES = ("ultralytics",)
_GELAN = {k: v.gelan for k, v in VARIANTS.items()}


def rename_key(key: str) -> str | None:
    """Our name for one reference key, or ``None`` for a dropped one.

    Example:
        >>> rename_key("model.22.cv4.1.2.weight"), rename_key("model.22.proto.upsample.bias")
        ('head.coef.1.2.weight', 'head.proto.upsample.bias')
    """
    return _c.rename_key(key, LAYOUT)


def infer_size_nc(src: Mapping[str, Tensor]) -> tuple[str, int]:
    """``(size, nc)`` of a reference YOLOv9-seg state dict."""
    return _c.infer_size_nc(src, _GELAN, LAYOUT)


def convert_state_dict(src: Mapping[str, Tensor], own: Mapping[str, Tensor], *, arch: str = "") -> dict[str, Tensor]:
    """Reference state dict -> a state dict for a network whose ``state_dict()`` is ``own``."""
    return _c.convert_state_dict(src, own, LAYOUT)


def match(fw: object) -> tuple[str, int] | None:
    """``(size, nc)`` when ``fw`` holds a three-level YOLOv9 (GELAN) network with a ``Segment``
    head, else ``None``."""
    return _c.match_layout(fw, LAYOUT, _GELAN)


def adapt_model(model: object, fw: object) -> None:
    """Build the ungrouped (``box_groups=1``) head when ``fw``'s box kernels are ungrouped."""
    groups = _c.box_groups_of(getattr(fw, "state_dict", {}), LAYOUT)
    if groups != 4:
        model.set_arch(box_groups=groups)  # type: ignore[attr-defined]
