"""Between object centroids and the grid of cells of a point family (FOMO: stride 8).

Targets (:func:`centroid_targets`): each object is the cell at stride ``s`` that holds its box
centre, ``(floor(cx / s), floor(cy / s))``, marked ``cls + 1``; every other cell is background
(0). When two objects fall in one cell, the larger class id is kept (a scatter with ``amax``,
order-independent, so the map is the same on every run and device). Built on the device from the
batch's tensors, with no host synchronisation.

Decoding (:func:`decode_points`): a per-cell softmax over ``nc + 1`` channels; a cell is an
object cell when an object class wins it (its probability beats background's and every other
class's) and that probability is at least ``conf``. Object cells of the same class that touch
(8-connectivity: sides or corners) are merged into one point: its position is the mean of the
cell centres weighted by their probabilities, its confidence the largest of them. Points are in
input pixels, ``(x, y, conf, cls)``, sorted by decreasing confidence.
"""

from __future__ import annotations

from typing import Any

import numpy as np
import torch
from torch import Tensor


def centroid_targets(batch: dict[str, Any], *, grid_hw: tuple[int, int], batch_size: int,
                     device: torch.device) -> Tensor:
    """Tensor[B, h, w] int64 class map of a detection batch (``batch_idx``, ``cls``, ``bboxes`` as
    normalised cx cy w h): ``cls + 1`` at each centroid cell, 0 elsewhere.

    Example:
        >>> b = {"batch_idx": torch.tensor([0, 1]), "cls": torch.tensor([2, 0]),
        ...      "bboxes": torch.tensor([[0.3, 0.6, 0.2, 0.2], [0.99, 0.01, 0.02, 0.02]])}
        >>> t = centroid_targets(b, grid_hw=(4, 4), batch_size=2, device=torch.device("cpu"))
        >>> t[0].nonzero().tolist(), int(t[0, 2, 1]), t[1].nonzero().tolist(), int(t[1, 0, 3])
        ([[2, 1]], 3, [[0, 3]], 1)
    """
    h, w = (int(v) for v in grid_hw)
    target = torch.zeros(batch_size * h * w, dtype=torch.int64, device=device)
    boxes = batch["bboxes"].to(device, non_blocking=True).float().view(-1, 4)
    if boxes.shape[0]:
        bidx = batch["batch_idx"].to(device, non_blocking=True).long().view(-1)
        cls = batch["cls"].to(device, non_blocking=True).long().view(-1)
        gx = (boxes[:, 0] * w).floor().long().clamp(0, w - 1)
        gy = (boxes[:, 1] * h).floor().long().clamp(0, h - 1)
        target.scatter_reduce_(0, (bidx * h + gy) * w + gx, cls + 1, reduce="amax")
    return target.view(batch_size, h, w)


def cell_scores(logits: Tensor, *, conf: float) -> tuple[Tensor, Tensor, Tensor]:
    """logits Tensor[B, nc + 1, h, w] -> (score Tensor[B, h, w] float32: the best object class's
    probability, cls Tensor[B, h, w] int64: that class, keep Tensor[B, h, w] bool: object cells)."""
    p = logits.float().softmax(1)
    score, cls = p[:, 1:].max(1)
    keep = (score > p[:, 0]) & (score >= conf)
    # an object class that ties with another object class still wins over background here
    return score, cls, keep


def merge_cells(score: np.ndarray, cls: np.ndarray, keep: np.ndarray, *, stride: int) -> np.ndarray:
    """One image's object cells -> ndarray[n, 4] float32 points ``x, y, conf, cls`` in input pixels
    (module docstring: same-class 8-connected cells merge), sorted by decreasing confidence.

    Example:
        >>> keep = np.zeros((3, 4), bool); keep[0, 0] = keep[1, 1] = keep[2, 3] = True
        >>> score = np.full((3, 4), 0.5, np.float32); score[2, 3] = 0.75
        >>> merge_cells(score, np.zeros((3, 4), np.int64), keep, stride=8).tolist()  # (0,0)+(1,1) merge
        [[28.0, 20.0, 0.75, 0.0], [8.0, 8.0, 0.5, 0.0]]
    """
    h, w = keep.shape
    seen = np.zeros_like(keep)
    out: list[tuple[float, float, float, float]] = []
    for y0, x0 in zip(*np.nonzero(keep), strict=True):
        if seen[y0, x0]:
            continue
        c = cls[y0, x0]
        seen[y0, x0] = True
        stack, sw, sx, sy, best = [(int(y0), int(x0))], 0.0, 0.0, 0.0, 0.0
        while stack:
            y, x = stack.pop()
            s = float(score[y, x])
            sw, sx, sy, best = sw + s, sx + s * (x + 0.5), sy + s * (y + 0.5), max(best, s)
            for dy in (-1, 0, 1):
                for dx in (-1, 0, 1):
                    ny, nx = y + dy, x + dx
                    if 0 <= ny < h and 0 <= nx < w and keep[ny, nx] and not seen[ny, nx] and cls[ny, nx] == c:
                        seen[ny, nx] = True
                        stack.append((ny, nx))
        out.append((sx / sw * stride, sy / sw * stride, best, float(c)))
    pts = np.asarray(out, np.float32).reshape(-1, 4)
    return pts[np.argsort(-pts[:, 2], kind="stable")]


def decode_points(logits: Tensor, *, stride: int, conf: float, classes: list[int] | None = None,
                  max_det: int = 300) -> list[Tensor]:
    """logits Tensor[B, nc + 1, h, w] -> per image Tensor[n, 4] float32 CPU points ``x, y, conf,
    cls`` in input pixels (at most ``max_det``, only ``classes`` when given). One device-to-host
    copy per batch.

    Example:
        >>> lg = torch.full((1, 3, 2, 2), -5.0); lg[0, 0] = 5.0; lg[0, 2, 1, 0] = 9.0
        >>> [round(v, 2) for v in decode_points(lg, stride=8, conf=0.5)[0][0].tolist()]
        [4.0, 12.0, 0.98, 1.0]
    """
    score, cls, keep = cell_scores(logits, conf=conf)
    if classes is not None:
        keep &= torch.isin(cls, torch.as_tensor(list(classes), device=cls.device))
    host = torch.stack([score, cls.float(), keep.float()], 1).cpu().numpy()
    out = []
    for s, c, k in host:
        pts = merge_cells(s, c.astype(np.int64), k > 0.5, stride=stride)[: max(int(max_det), 0)]
        out.append(torch.from_numpy(np.ascontiguousarray(pts)))
    return out


def unletterbox_points(points: Tensor, *, ratio: float | tuple[float, float], pad: tuple[float, float],
                       orig_hw: tuple[int, int]) -> Tensor:
    """points Tensor[n, >=2] (x, y first, input pixels) -> a copy with x, y in original pixels,
    clipped to the image.

    Example:
        >>> unletterbox_points(torch.tensor([[20.0, 30.0, 0.5, 1.0]]), ratio=0.5, pad=(4.0, 0.0), orig_hw=(80, 40)).tolist()
        [[32.0, 60.0, 0.5, 1.0]]
    """
    rw, rh = (ratio, ratio) if isinstance(ratio, (int, float)) else (float(ratio[0]), float(ratio[-1]))
    out = points.detach().float().cpu().clone()
    out[:, 0] = ((out[:, 0] - pad[0]) / rw).clamp(0, orig_hw[1])
    out[:, 1] = ((out[:, 1] - pad[1]) / rh).clamp(0, orig_hw[0])
    return out
