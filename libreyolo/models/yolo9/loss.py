"""The YOLOv9 detection loss (task-aligned assignment, BCE class, CIoU + DFL box terms) lives in
the lineage package, :mod:`libreyolo.models._gelan.loss`; re-exported here under this family."""

from .._gelan.loss import Assignment, TaskAlignedAssigner, YOLO9Loss, build_targets, dfl_loss

__all__ = ["Assignment", "TaskAlignedAssigner", "YOLO9Loss", "build_targets", "dfl_loss"]
