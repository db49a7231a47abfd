"""Non-maximum suppression on top of torchvision's kernels."""

from __future__ import annotations

import torch
from torch import Tensor
from torchvision.ops import batched_nms, nms


def non_max_suppression(
    boxes: Tensor,
    scores: Tensor,
    labels: Tensor,
    *,
    iou: float,
    max_det: int,
    agnostic: bool = False,
) -> Tensor:
    """Class-aware (or class-agnostic) NMS.

    boxes (Tensor[N, 4], float) xyxy; scores (Tensor[N]); labels (Tensor[N], int64).
    Returns keep (Tensor[K], int64) indices sorted by decreasing score, ``K <= max_det``.
    """
    if boxes.numel() == 0:
        return torch.zeros(0, dtype=torch.long, device=boxes.device)
    boxes, scores = boxes.float(), scores.float()
    keep = nms(boxes, scores, iou) if agnostic else batched_nms(boxes, scores, labels, iou)
    return keep[:max_det]
