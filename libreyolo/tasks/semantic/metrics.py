"""Semantic-segmentation metrics from a pixel confusion matrix.

``confusion[t, p]`` counts the pixels of true class ``t`` predicted as ``p`` (pixels whose label
is outside ``0..nc-1``, the ignored ones, are left out). From it:

- IoU of class c: ``TP / (TP + FP + FN)`` = ``C[c, c] / (row c + column c - C[c, c])``;
- mIoU: the mean IoU over the classes that occur in the ground truth or in the predictions
  (a class absent from both has no IoU and is left out of the mean, as in mmsegmentation's
  ``nanmean``);
- pixel accuracy (aAcc): ``trace / sum``, the share of scored pixels classified right;
- mean class accuracy (mAcc): the mean over classes with ground truth of ``C[c, c] / row c``.
"""

from __future__ import annotations

import numpy as np
import torch
from torch import Tensor


def confusion(pred: Tensor, target: Tensor, nc: int) -> Tensor:
    """Tensor[nc, nc] int64 ``[true, predicted]`` pixel counts of one or more maps of equal shape;
    target values outside ``0..nc-1`` are not counted.

    Example:
        >>> confusion(torch.tensor([0, 1, 1, 0]), torch.tensor([0, 1, 0, 255]), 2).tolist()
        [[1, 1], [0, 1]]
    """
    t, p = target.reshape(-1).long(), pred.reshape(-1).long().to(target.device)
    keep = (t >= 0) & (t < nc)
    idx = t[keep] * nc + p[keep]
    return torch.bincount(idx, minlength=nc * nc).reshape(nc, nc).cpu()


def scores(conf: np.ndarray | Tensor) -> dict[str, object]:
    """``{"iou": ndarray[nc] (NaN where a class occurs nowhere), "acc": ndarray[nc] (NaN without ground
    truth), "mIoU", "mAcc", "aAcc"}`` of a confusion matrix (module docstring).

    Example:
        >>> s = scores(np.array([[3, 1], [0, 4]]))
        >>> s["iou"].round(4).tolist(), round(s["mIoU"], 4), s["aAcc"]
        ([0.75, 0.8], 0.775, 0.875)
    """
    c = np.asarray(conf, dtype=np.float64)
    tp = np.diag(c)
    gt, pr = c.sum(1), c.sum(0)
    union = gt + pr - tp
    with np.errstate(invalid="ignore", divide="ignore"):
        iou = np.where(union > 0, tp / np.maximum(union, 1), np.nan)
        acc = np.where(gt > 0, tp / np.maximum(gt, 1), np.nan)
    total = c.sum()
    return {"iou": iou, "acc": acc, "mIoU": float(np.nanmean(iou)) if np.isfinite(iou).any() else 0.0,
            "mAcc": float(np.nanmean(acc)) if np.isfinite(acc).any() else 0.0,
            "aAcc": float(tp.sum() / total) if total else 0.0}
