"""YOLO-NAS training loss: the repository's task-aligned assigner with BCE class, CIoU and DFL
box terms (:class:`libreyolo.models._gelan.loss.YOLO9Loss`), reused unchanged. It reads the
number of distribution bins from the network (``net.reg_max`` = 17 for YOLO-NAS), so DFL
targets are clamped to [0, 15.99] grid units per side.

Deviation from upstream, on purpose: super-gradients trains YOLO-NAS with ``PPYoloELoss``
(ATSS assignment for the first epochs, then task-aligned; varifocal class loss; GIoU; DFL;
weights 1.0 / 2.5 / 0.5). Here the loss is the YOLOv9 one (task-aligned from the first step,
BCE on IoU-aware soft targets, CIoU; gains box 7.5, cls 0.5, dfl 1.5), so no second copy of an
assigner or DFL loss exists in the repository.
"""

from __future__ import annotations

from .._gelan.loss import TaskAlignedAssigner, YOLO9Loss

YOLONASLoss = YOLO9Loss

__all__ = ["TaskAlignedAssigner", "YOLONASLoss"]
