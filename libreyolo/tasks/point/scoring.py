"""Point scoring in original image pixels: each image's points (input pixels) and its ground-truth
boxes (the detection batch's, normalised to the input) go back through its letterbox
(``ratio_pad``), then :mod:`.metrics` counts true / false positives and misses per class. The
headline numbers are precision, recall and F1 pooled over the classes; fitness (what training
picks best.pt by) is F1.
"""

from __future__ import annotations

import json  # noqa: F401  (the examples use it)
from pathlib import Path
from typing import Any

import numpy as np
from torch import Tensor

from ...ops.points import unletterbox_points
from ..base import TaskMetrics
from .metrics import count, prf


class PointMetrics(TaskMetrics):
    """The result of a point validation: a dict of ``precision``, ``recall``, ``F1``, ``fitness``
    (= F1), ``images``, ``instances``, ``ms_per_image``, with attached ``names``, ``counts``
    (ndarray[nc, 3] ``tp, fp, fn``), ``per_class`` ({class id: {"precision", "recall", "F1",
    "instances"}} for the classes with ground truth or predictions), ``radius`` (None: a point
    matches inside the box), ``speed``, ``save_dir`` and ``losses``.

    Example:
        >>> m = PointMetrics.from_counts(np.array([[3, 1, 1], [0, 0, 0]]), names={0: "a", 1: "b"}, images=2)
        >>> print(m.summary())
                   class   images  instances       P       R      F1
                     all        2          4   0.750   0.750   0.750
                       a        -          4   0.750   0.750   0.750
        >>> json.loads(m.to_json(indent=None))["per_class"]["a"]["F1"]
        0.75
    """

    def __init__(self, values: dict[str, float], *, names: dict[int, str], counts: np.ndarray | None = None,
                 radius: float | None = None, speed: dict[str, float] | None = None,
                 save_dir: Path | None = None, losses: dict[str, float] | None = None) -> None:
        super().__init__(values, speed=speed, save_dir=save_dir, losses=losses)
        self.names = dict(names)
        nc = len(self.names)
        self.counts = np.asarray(counts, np.int64) if counts is not None else np.zeros((nc, 3), np.int64)
        self.radius = radius
        self.per_class: dict[int, dict[str, float]] = {}
        for c in range(nc):
            tp, fp, fn = (int(v) for v in self.counts[c])
            if tp + fp + fn:
                p, r, f = prf(tp, fp, fn)
                self.per_class[c] = {"precision": p, "recall": r, "F1": f, "instances": float(tp + fn)}

    @classmethod
    def from_counts(cls, counts: np.ndarray, *, names: dict[int, str], images: int, radius: float | None = None,
                    **kw: Any) -> PointMetrics:
        """The metrics of ``counts`` (ndarray[nc, 3] ``tp, fp, fn``)."""
        tp, fp, fn = (int(v) for v in np.asarray(counts).sum(0))
        p, r, f = prf(tp, fp, fn)
        values = {"precision": p, "recall": r, "F1": f, "fitness": f, "images": float(images),
                  "instances": float(tp + fn)}
        return cls(values, names=names, counts=counts, radius=radius, **kw)

    def summary(self) -> str:
        """The per-class table: an ``all`` row, then one row per class that occurs."""
        lines = [f"{'class':>16} {'images':>8} {'instances':>10} {'P':>7} {'R':>7} {'F1':>7}",
                 f"{'all':>16} {int(self.get('images', 0)):>8} {int(self.get('instances', 0)):>10} "
                 f"{self.get('precision', 0.0):>7.3f} {self.get('recall', 0.0):>7.3f} {self.get('F1', 0.0):>7.3f}"]
        for c, r in self.per_class.items():
            lines.append(f"{self.names.get(c, str(c))[:16]:>16} {'-':>8} {int(r['instances']):>10} "
                         f"{r['precision']:>7.3f} {r['recall']:>7.3f} {r['F1']:>7.3f}")
        return "\n".join(lines)

    def details(self) -> dict[str, Any]:
        """The per-class table, the names, the counts and the matching rule, JSON-ready."""
        return {"per_class": {self.names.get(c, str(c)): dict(v) for c, v in self.per_class.items()},
                "names": {str(k): v for k, v in self.names.items()},
                "counts": {"columns": ["tp", "fp", "fn"], "rows": self.counts.astype(int).tolist()},
                "match": "inside the box" if self.radius is None else f"within {self.radius} px of the centre"}


class PointScorer:
    """Accumulates per-class ``tp, fp, fn`` over a split (``add`` per batch), then :meth:`result`."""

    def __init__(self, names: dict[int, str], *, radius: float | None = None) -> None:
        self.names = names
        self.nc = len(names)
        self.radius = radius
        self.counts = np.zeros((self.nc, 3), np.int64)
        self.images = 0

    def add(self, batch: dict[str, Any], points: list[Tensor], *, input_hw: tuple[int, int]) -> None:
        """points: per image Tensor[n, 4] (x, y, conf, cls) in input pixels; ``batch`` is a detection
        batch (``batch_idx``, ``cls``, ``bboxes``, ``ori_shape``, ``ratio_pad``)."""
        h_in, w_in = input_hw
        bidx = batch["batch_idx"].cpu().view(-1)
        cls = batch["cls"].cpu().view(-1).numpy().astype(np.int64)
        boxes = batch["bboxes"].cpu().float().view(-1, 4).numpy().astype(np.float64)
        for i, pts in enumerate(points):
            oh, ow = (int(v) for v in batch["ori_shape"][i])
            ratio, pad = batch["ratio_pad"][i]
            r = float(ratio[0]) if isinstance(ratio, (tuple, list)) else float(ratio)
            sel = (bidx == i).numpy()
            b = boxes[sel]
            xyxy = np.stack([(b[:, 0] - b[:, 2] / 2) * w_in, (b[:, 1] - b[:, 3] / 2) * h_in,
                             (b[:, 0] + b[:, 2] / 2) * w_in, (b[:, 1] + b[:, 3] / 2) * h_in], 1).reshape(-1, 4)
            xyxy[:, 0::2] = np.clip((xyxy[:, 0::2] - pad[0]) / r, 0, ow)
            xyxy[:, 1::2] = np.clip((xyxy[:, 1::2] - pad[1]) / r, 0, oh)
            pred = unletterbox_points(pts, ratio=r, pad=(float(pad[0]), float(pad[1])), orig_hw=(oh, ow)).numpy()
            self.counts += count(pred.astype(np.float64), xyxy, cls[sel], self.nc, radius=self.radius)
            self.images += 1

    def result(self, *, images: int, speed: dict[str, float], ms_per_image: float, losses: dict[str, float],
               save_dir: Path | None) -> PointMetrics:
        m = PointMetrics.from_counts(self.counts, names=self.names, images=images, radius=self.radius, speed=speed,
                                     save_dir=save_dir, losses=losses)
        m["ms_per_image"] = ms_per_image
        return m

    def summary(self, result: PointMetrics) -> str:
        return result.summary()

