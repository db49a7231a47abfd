"""Map a reference YOLOv9-P2 state dict (``model.<i>.<...>`` keys) onto the ``yolo9_p2`` network.

No published YOLOv9-P2 checkpoint exists; this reads a model built by Ultralytics from a
YOLOv9 yaml extended to P2 the way ``yolov8-p2.yaml`` extends ``yolov8.yaml`` (layers 0..15 as
``yolov9{t,s}.yaml``, then the stride-4 step at 16..18, the way back at 19..21 and the stride-16 /
32 steps at 22..27, ``Detect`` at 28). Keys as in :mod:`libreyolo.models.yolo9.convert`
(layout ``P2_LAYOUT`` of :mod:`libreyolo.models._gelan.convert`); Ultralytics' ungrouped box
branch converts onto the ``box_groups=1`` head, which :func:`adapt_model` builds.
"""

from __future__ import annotations

from collections.abc import Mapping

from torch import Tensor

from .._gelan import convert as _c
from .variants import VARIANTS

LAYOUT = _c.P2_LAYOUT
SOURCES = ("ultralytics",)


def rename_key(key: str) -> str | None:
    """Our name for one reference key, or ``None`` for a dropped one.

    Example:
        >>> rename_key("model.28.cv3.0.2.weight"), rename_key("model.18.cv4.conv.weight")
        ('head.cls.0.2.weight', 'top2.cv4.conv.weight')
    """
    return _c.rename_key(key, LAYOUT)


def infer_size_nc(src: Mapping[str, Tensor]) -> tuple[str, int]:
    """``(size, nc)`` of a reference YOLOv9-P2 state dict."""
    return _c.infer_size_nc(src, VARIANTS, LAYOUT)


def convert_state_dict(src: Mapping[str, Tensor], own: Mapping[str, Tensor], *, arch: str = "") -> dict[str, Tensor]:
    """Reference state dict -> a state dict for a network whose ``state_dict()`` is ``own``."""
    return _c.convert_state_dict(src, own, LAYOUT)


def match(fw: object) -> tuple[str, int] | None:
    """``(size, nc)`` when ``fw`` holds a four-level YOLOv9-P2 (GELAN) network, else ``None``."""
    return _c.match_layout(fw, LAYOUT, VARIANTS)


def adapt_model(model: object, fw: object) -> None:
    """Build the ungrouped (``box_groups=1``) head when ``fw``'s box kernels are ungrouped."""
    groups = _c.box_groups_of(getattr(fw, "state_dict", {}), LAYOUT)
    if groups != 4:
        model.set_arch(box_groups=groups)  # type: ignore[attr-defined]
