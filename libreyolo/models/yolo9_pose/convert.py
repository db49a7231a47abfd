"""Map an Ultralytics YOLOv9 pose state dict (``model.<i>.<...>`` keys) onto the ``yolo9_pose``
network: a YOLOv9-t/s yaml whose ``Detect`` is replaced by ``Pose(nc, kpt_shape)`` (Ultralytics
ships no YOLOv9 pose config; its ``Pose`` head is the one of ``yolov8n-pose.yaml``).

Backbone and neck keys as in :mod:`libreyolo.models.yolo9.convert`; the head (layer 22, layout
``POSE_LAYOUT`` of :mod:`libreyolo.models._gelan.convert`) maps ``cv2`` / ``cv3`` / ``cv4`` to our
``box`` / ``cls`` / ``kpt``. Only ``kpt_shape [K, 3]`` heads convert (x, y, visibility). Ultralytics'
box branch is ungrouped and its keypoint count is read from ``cv4``, so :func:`adapt_model`
builds the ``box_groups=1``, ``nkpt=K`` head first.
"""

from __future__ import annotations

from collections.abc import Mapping

from torch import Tensor

from ...errors import CheckpointError
from .._gelan import convert as _c
from .nn import VARIANTS

LAYOUT = _c.POSE_LAYOUT
SOURCES = ("ultralytics",)


def rename_key(key: str) -> str | None:
    """Our name for one reference key, or ``None`` for a dropped one.

    Example:
        >>> rename_key("model.22.cv4.1.2.weight"), rename_key("model.22.cv2.0.0.conv.weight")
        ('head.kpt.1.2.weight', 'head.box.0.0.conv.weight')
    """
    return _c.rename_key(key, LAYOUT)


def infer_size_nc(src: Mapping[str, Tensor]) -> tuple[str, int]:
    """``(size, nc)`` of a reference YOLOv9 pose state dict."""
    return _c.infer_size_nc(src, VARIANTS, LAYOUT)


def nkpt_of(src: Mapping[str, Tensor]) -> int:
    """Keypoints per object of a reference pose head: the output channels of ``cv4`` / 3."""
    h = LAYOUT.head_index
    w = src.get(f"model.{h}.cv4.0.2.weight", src.get(f"{h}.cv4.0.2.weight"))
    if w is None:
        raise CheckpointError("this YOLOv9 pose state dict has no keypoint branch (model.22.cv4.0.2.weight)")
    n = int(w.shape[0])
    if n % 3:
        raise CheckpointError(f"the keypoint branch has {n} outputs, not 3 per keypoint: only kpt_shape [K, 3] "
                              "heads convert")
    return n // 3


def convert_state_dict(src: Mapping[str, Tensor], own: Mapping[str, Tensor], *, arch: str = "") -> dict[str, Tensor]:
    """Reference state dict -> a state dict for a network whose ``state_dict()`` is ``own``."""
    return _c.convert_state_dict(src, own, LAYOUT)


def match(fw: object) -> tuple[str, int] | None:
    """``(size, nc)`` when ``fw`` holds a three-level YOLOv9 (GELAN) network with a ``Pose`` head,
    else ``None``."""
    return _c.match_layout(fw, LAYOUT, VARIANTS)


def adapt_model(model: object, fw: object) -> None:
    """Build the head the weights need: ungrouped box branch when theirs is, their keypoint count."""
    sd = getattr(fw, "state_dict", {})
    model.set_arch(box_groups=_c.box_groups_of(sd, LAYOUT), nkpt=nkpt_of(sd))  # type: ignore[attr-defined]
