"""Point metrics: precision, recall and F1 of predicted centroids against ground-truth boxes.

Matching (per image, per class): predictions are taken by decreasing confidence; a prediction
matches a ground-truth object of its class that is still unmatched when its point lies inside
that object's box (edges included), or, with ``radius`` given, when it lies within ``radius``
pixels of the box centre instead. Among several candidates the one with the nearest centre wins.
Each object is matched at most once: a matched prediction is a true positive, the other
predictions false positives, the unmatched objects false negatives. Everything is in original
image pixels. The overall numbers pool the counts of all classes (micro average).
"""

from __future__ import annotations

import numpy as np


def match_points(pred: np.ndarray, gt: np.ndarray, gt_cls: np.ndarray, *, radius: float | None = None) -> np.ndarray:
    """pred ndarray[n, 4] (x, y, conf, cls), gt ndarray[g, 4] xyxy boxes, gt_cls ndarray[g] ->
    ndarray[n] bool: which predictions are true positives (module docstring).

    Example:
        >>> gt = np.array([[0, 0, 10, 10], [20, 0, 30, 10]], float)
        >>> pred = np.array([[5, 5, 0.9, 0], [6, 4, 0.8, 0], [25, 5, 0.7, 1], [40, 40, 0.6, 0]], float)
        >>> match_points(pred, gt, np.array([0, 0])).tolist()
        [True, False, False, False]
        >>> match_points(pred[3:], gt, np.array([0, 0]), radius=50.0).tolist()
        [True]
    """
    n = len(pred)
    tp = np.zeros(n, bool)
    if n == 0 or len(gt) == 0:
        return tp
    centres = np.stack([(gt[:, 0] + gt[:, 2]) / 2, (gt[:, 1] + gt[:, 3]) / 2], 1)
    used = np.zeros(len(gt), bool)
    for i in np.argsort(-pred[:, 2], kind="stable"):
        x, y, _, c = pred[i]
        d = np.hypot(centres[:, 0] - x, centres[:, 1] - y)
        if radius is None:
            ok = (gt[:, 0] <= x) & (x <= gt[:, 2]) & (gt[:, 1] <= y) & (y <= gt[:, 3])
        else:
            ok = d <= radius
        ok &= (gt_cls == int(c)) & ~used
        if ok.any():
            j = int(np.argmin(np.where(ok, d, np.inf)))
            used[j] = tp[i] = True
    return tp


def prf(tp: int, fp: int, fn: int) -> tuple[float, float, float]:
    """(precision, recall, F1) of counts; 0 where undefined.

    Example:
        >>> prf(3, 1, 2)
        (0.75, 0.6, 0.6667)
    """
    p = tp / (tp + fp) if tp + fp else 0.0
    r = tp / (tp + fn) if tp + fn else 0.0
    f = 2 * p * r / (p + r) if p + r else 0.0
    return round(p, 4), round(r, 4), round(f, 4)


def count(pred: np.ndarray, gt: np.ndarray, gt_cls: np.ndarray, nc: int, *,
          radius: float | None = None) -> np.ndarray:
    """ndarray[nc, 3] int64 ``tp, fp, fn`` per class of one image.

    Example:
        >>> count(np.array([[5, 5, 0.9, 0], [1, 1, 0.5, 1]]), np.array([[0, 0, 10, 10]]), np.array([0]), 2).tolist()
        [[1, 0, 0], [0, 1, 0]]
    """
    tp = match_points(pred, gt, gt_cls, radius=radius)
    pc = pred[:, 3].astype(np.int64) if len(pred) else np.zeros(0, np.int64)
    out = np.zeros((nc, 3), np.int64)
    out[:, 0] = np.bincount(pc[tp], minlength=nc)[:nc]
    out[:, 1] = np.bincount(pc[~tp], minlength=nc)[:nc]
    out[:, 2] = np.bincount(gt_cls.astype(np.int64), minlength=nc)[:nc] - out[:, 0]
    return out
