"""Semantic scoring in original image pixels: each image's logits go back through its letterbox
(:func:`~.maps.to_original`, the same mapping as prediction) and are compared with the mask as
stored; ignored pixels (``ignore_index``) are not counted. The headline numbers are
:mod:`.metrics`' mIoU, pixel accuracy (``aAcc``) and mean class accuracy (``mAcc``); fitness
(what training picks best.pt by) is mIoU.
"""

from __future__ import annotations

import json  # noqa: F401  (the examples use it)
from pathlib import Path
from typing import Any

import numpy as np
import torch
from torch import Tensor

from ..base import TaskMetrics
from .maps import to_original
from .metrics import confusion, scores


class SemMetrics(TaskMetrics):
    """The result of a semantic validation: a dict of ``mIoU``, ``aAcc``, ``mAcc``, ``fitness``
    (= mIoU), ``images``, ``ms_per_image``, with attached ``names``, ``per_class`` ({class id:
    {"iou", "acc", "pixels"}} for the classes that occur), ``confusion_matrix`` (ndarray[nc, nc]
    int64, ``[true, predicted]`` pixels), ``speed``, ``save_dir`` and ``losses``.

    Example:
        >>> m = SemMetrics({"mIoU": 0.775, "aAcc": 0.875, "mAcc": 0.875, "images": 1.0}, names={0: "bg", 1: "car"},
        ...                confusion_matrix=np.array([[3, 1], [0, 4]]))
        >>> print(m.summary())
                   class   pixels     IoU     Acc
                     all        8   0.775   0.875  (aAcc 0.875)
                      bg        4   0.750   0.750
                     car        4   0.800   1.000
        >>> json.loads(m.to_json(indent=None))["per_class"]["car"]["iou"]
        0.8
    """

    def __init__(self, values: dict[str, float], *, names: dict[int, str], confusion_matrix: np.ndarray | None = None,
                 speed: dict[str, float] | None = None, save_dir: Path | None = None,
                 losses: dict[str, float] | None = None) -> None:
        super().__init__(values, speed=speed, save_dir=save_dir, losses=losses)
        self.names = dict(names)
        nc = len(self.names)
        self.confusion_matrix = (np.asarray(confusion_matrix, dtype=np.int64) if confusion_matrix is not None
                                 else np.zeros((nc, nc), dtype=np.int64))
        s = scores(self.confusion_matrix)
        gt = self.confusion_matrix.sum(1)
        self.per_class = {c: {"iou": float(s["iou"][c]), "acc": float(s["acc"][c]) if gt[c] else 0.0,
                              "pixels": float(gt[c])} for c in range(nc) if np.isfinite(s["iou"][c])}

    @property
    def ious(self) -> np.ndarray:
        """IoU per class id (ndarray[nc]); NaN for a class in neither the masks nor the predictions."""
        return np.asarray(scores(self.confusion_matrix)["iou"])

    def summary(self) -> str:
        """The per-class table: an ``all`` row, then one row per class that occurs."""
        total = int(self.confusion_matrix.sum())
        lines = [f"{'class':>16} {'pixels':>8} {'IoU':>7} {'Acc':>7}",
                 f"{'all':>16} {total:>8} {self.get('mIoU', 0.0):>7.3f} {self.get('mAcc', 0.0):>7.3f}  "
                 f"(aAcc {self.get('aAcc', 0.0):.3f})"]
        for c, r in self.per_class.items():
            lines.append(f"{self.names.get(c, str(c))[:16]:>16} {int(r['pixels']):>8} {r['iou']:>7.3f} {r['acc']:>7.3f}")
        return "\n".join(lines)

    def details(self) -> dict[str, Any]:
        """The per-class table, the names and the confusion matrix, JSON-ready."""
        return {"per_class": {self.names.get(c, str(c)): dict(v) for c, v in self.per_class.items()},
                "names": {str(k): v for k, v in self.names.items()},
                "confusion_matrix": self.confusion_matrix.astype(int).tolist()}


class SemanticScorer:
    """Accumulates the pixel confusion matrix of a split (``add`` per batch), then :meth:`result`."""

    def __init__(self, names: dict[int, str]) -> None:
        self.names = names
        self.nc = len(names)
        self.conf = torch.zeros(self.nc, self.nc, dtype=torch.int64)

    def add(self, batch: dict[str, Any], outputs: list[Tensor], *, input_hw: tuple[int, int]) -> None:
        """outputs: per image logits Tensor[nc, h, w]; ``batch`` holds ``ori_mask`` / ``ratio_pad``."""
        for logits, mask, (ratio, pad) in zip(outputs, batch["ori_mask"], batch["ratio_pad"], strict=True):
            pred = to_original(logits, input_hw=input_hw, ratio=float(ratio), pad=pad, orig_hw=tuple(mask.shape))
            self.conf += confusion(pred, mask.to(pred.device), self.nc)

    def result(self, *, images: int, speed: dict[str, float], ms_per_image: float, losses: dict[str, float],
               save_dir: Path | None) -> SemMetrics:
        s = scores(self.conf.numpy())
        values = {"mIoU": s["mIoU"], "aAcc": s["aAcc"], "mAcc": s["mAcc"], "fitness": s["mIoU"],
                  "images": float(images), "ms_per_image": ms_per_image}
        return SemMetrics(values, names=self.names, confusion_matrix=self.conf.numpy(), speed=speed,
                          save_dir=save_dir, losses=losses)

    def summary(self, result: SemMetrics) -> str:
        return result.summary()
