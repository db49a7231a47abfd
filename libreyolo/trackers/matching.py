"""Association costs and the optimal assignment used by the trackers.

Example:
    >>> a = np.array([[0.0, 0, 10, 10], [20, 20, 30, 30]])
    >>> b = np.array([[21.0, 21, 31, 31], [1, 1, 11, 11]])
    >>> assign(1.0 - box_iou(a, b), max_cost=0.8)
    ([(0, 1), (1, 0)], [], [])
"""

from __future__ import annotations

import numpy as np

from ..ops.boxes import box_iou_np


def box_iou(a: np.ndarray, b: np.ndarray) -> np.ndarray:
    """IoU of every box of ``a`` (N, 4) with every box of ``b`` (M, 4), xyxy -> (N, M), in float64
    (:func:`libreyolo.ops.boxes.box_iou_np`)."""
    a = np.asarray(a, dtype=np.float64).reshape(-1, 4)
    b = np.asarray(b, dtype=np.float64).reshape(-1, 4)
    if len(a) == 0 or len(b) == 0:
        return np.zeros((len(a), len(b)))
    return box_iou_np(a, b)


def iou_cost(tracks_xyxy: np.ndarray, dets_xyxy: np.ndarray, scores: np.ndarray | None = None) -> np.ndarray:
    """``1 - IoU`` (T, D); with ``scores`` (D,) the IoU is first weighted by the detection score,
    so a confident detection wins a tie between two overlapping ones."""
    iou = box_iou(tracks_xyxy, dets_xyxy)
    if scores is not None and iou.size:
        iou = iou * np.asarray(scores, dtype=np.float64)[None, :]
    return 1.0 - iou


def assign(cost: np.ndarray, *, max_cost: float) -> tuple[list[tuple[int, int]], list[int], list[int]]:
    """Minimum-total-cost one-to-one matching of rows to columns, keeping only pairs whose cost is
    at most ``max_cost``. Returns (matched (row, col) pairs, unmatched rows, unmatched cols)."""
    rows, cols = cost.shape
    if rows == 0 or cols == 0:
        return [], list(range(rows)), list(range(cols))
    from scipy.optimize import linear_sum_assignment

    # pairs above the gate must never be chosen in place of an allowed pair: make them dear
    gated = np.where(cost <= max_cost, cost, max_cost + 1e6)
    r, c = linear_sum_assignment(gated)
    pairs = [(int(i), int(j)) for i, j in zip(r, c, strict=True) if cost[i, j] <= max_cost]
    mr = {i for i, _ in pairs}
    mc = {j for _, j in pairs}
    return pairs, [i for i in range(rows) if i not in mr], [j for j in range(cols) if j not in mc]
