"""The RTMDet detection loss (dynamic soft label assignment, Quality Focal Loss, GIoU) lives in the
lineage package, :mod:`libreyolo.models._rtmdet.loss`; re-exported here under this family."""

from .._rtmdet.loss import (
    Assignment,
    DynamicSoftLabelAssigner,
    RTMDetLoss,
    build_targets,
    giou_loss,
    pairwise_iou,
    quality_focal_loss,
)

__all__ = ["Assignment", "DynamicSoftLabelAssigner", "RTMDetLoss", "build_targets", "giou_loss", "pairwise_iou",
           "quality_focal_loss"]
