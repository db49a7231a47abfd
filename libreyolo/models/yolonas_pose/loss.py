"""YOLO-NAS-Pose training loss: the lineage's dense-pose loss
(:class:`libreyolo.models._gelan.pose.DensePoseLoss`, the one yolo9_pose trains with), i.e. the
detection loss the ``yolonas`` family uses (task-aligned assignment, BCE class, CIoU and DFL box
terms over 17 bins) plus an OKS-style keypoint location term and a BCE visibility term on the
assigned foreground anchors; keypoints decode with this network's ``kpt_scale`` 1.

Deviations from upstream, on purpose (no second copy of an assigner or a keypoint loss exists in
the repository): super-gradients trains YOLO-NAS-Pose with ``YoloNASPoseLoss``
(``coco2017_yolo_nas_pose_train_params.yaml``: task-aligned assignment whose alignment metric is
multiplied by the pose OKS, ``assigner_multiply_by_pose_oks``; focal class loss; CIoU + DFL box
terms; an OKS pose-regression term rescaled by the assigned score and a focal visibility term;
weights classification 1.0, IoU 2.5, DFL 0.01, pose classification 1.0, pose regression 34.0;
AdamW, EMA). Here: assignment on boxes only, BCE class loss on IoU-aware targets, CIoU, the
un-rescaled OKS term and a BCE visibility term; gains box 7.5, pose 12.0, kobj 1.0, cls 0.5,
dfl 1.5 (Ultralytics' pose recipe); the library's default optimiser schedule.
"""

from __future__ import annotations

from .._gelan.pose import DensePoseLoss

YOLONASPoseLoss = DensePoseLoss

__all__ = ["YOLONASPoseLoss"]
