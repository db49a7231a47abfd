"""Map a reference YOLOv9 end-to-end state dict (``model.<i>.<...>`` keys) onto ``yolo9_e2e``.

No published checkpoint of this network exists; this reads a model built by Ultralytics from
``yolov9{t,s}.yaml`` with the ``Detect`` layer replaced by ``v10Detect`` (YOLOv10's dual head).
Backbone and neck as :mod:`libreyolo.models.yolo9.convert`; in the head ``cv2`` / ``cv3`` are
our ``o2m.box`` / ``o2m.cls``, ``one2one_cv2`` / ``one2one_cv3`` our ``o2o.box`` / ``o2o.cls``
(layout ``E2E_LAYOUT`` of :mod:`libreyolo.models._gelan.convert`).
"""

from __future__ import annotations

from collections.abc import Mapping

from torch import Tensor

from .._gelan import convert as _c
from .nn import VARIANTS

LAYOUT = _c.E2E_LAYOUT
SOURCES = ("ultralytics",)


def rename_key(key: str) -> str | None:
    """Our name for one reference key, or ``None`` for a dropped one.

    Example:
        >>> rename_key("model.22.one2one_cv2.0.2.weight"), rename_key("model.22.cv3.1.0.0.conv.weight")
        ('head.o2o.box.0.2.weight', 'head.o2m.cls.1.0.0.conv.weight')
    """
    return _c.rename_key(key, LAYOUT)


def infer_size_nc(src: Mapping[str, Tensor]) -> tuple[str, int]:
    """``(size, nc)`` of a reference YOLOv9 end-to-end state dict."""
    return _c.infer_size_nc(src, VARIANTS, LAYOUT)


def convert_state_dict(src: Mapping[str, Tensor], own: Mapping[str, Tensor], *, arch: str = "") -> dict[str, Tensor]:
    """Reference state dict -> a state dict for a network whose ``state_dict()`` is ``own``."""
    return _c.convert_state_dict(src, own, LAYOUT)


def match(fw: object) -> tuple[str, int] | None:
    """``(size, nc)`` when ``fw`` holds a YOLOv9 network with the ``v10Detect`` head, else ``None``."""
    return _c.match_layout(fw, LAYOUT, VARIANTS)
