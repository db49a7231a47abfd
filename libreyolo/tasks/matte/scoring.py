"""Matte scoring in original image pixels: each image's predicted alpha goes back through its
letterbox (:func:`~libreyolo.tasks.depth.maps.to_original`, the same mapping as prediction) and is
compared with the mask as stored (:mod:`.metrics`). Headline numbers: IoU, MAE, F-measure and
S-measure, each the mean over the images; fitness (what training picks best.pt by) is IoU.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from torch import Tensor

from ..depth.maps import to_original
from .metrics import matte_errors

KEYS = ("iou", "mae", "fmeasure", "smeasure")


class MatteMetrics(dict):
    """The result of a matte validation: a dict of ``iou``, ``mae``, ``fmeasure``, ``smeasure``,
    ``fitness`` (= iou), ``images``, ``ms_per_image``, with attached ``speed``, ``save_dir`` and ``losses``.

    Example:
        >>> m = MatteMetrics({"iou": 0.75, "mae": 0.05, "fmeasure": 0.8, "smeasure": 0.85, "images": 2.0})
        >>> print(m.summary())
          images      IoU      MAE  F-meas.  S-meas.
               2    0.750    0.050    0.800    0.850
        >>> json.loads(m.to_json(indent=None))["metrics"]["iou"]
        0.75
    """

    def __init__(self, values: dict[str, float], *, speed: dict[str, float] | None = None,
                 save_dir: Path | None = None, losses: dict[str, float] | None = None) -> None:
        super().__init__(values)
        self.speed = dict(speed or {"preprocess": 0.0, "inference": 0.0, "postprocess": 0.0})
        self.save_dir = save_dir
        self.losses = dict(losses or {})

    def summary(self) -> str:
        """One header line and one row."""
        return (f"{'images':>8} {'IoU':>8} {'MAE':>8} {'F-meas.':>8} {'S-meas.':>8}\n"
                f"{int(self.get('images', 0)):>8} {self.get('iou', 0.0):>8.3f} {self.get('mae', 0.0):>8.3f} "
                f"{self.get('fmeasure', 0.0):>8.3f} {self.get('smeasure', 0.0):>8.3f}")

    def to_dict(self) -> dict[str, Any]:
        """Everything as JSON-ready Python types."""
        return {"metrics": {k: float(v) for k, v in self.items()},
                "speed": {k: float(v) for k, v in self.speed.items()},
                "losses": {k: float(v) for k, v in self.losses.items()},
                "save_dir": str(self.save_dir) if self.save_dir is not None else None}

    def to_json(self, *, indent: int | None = 2) -> str:
        """:meth:`to_dict` as a JSON string."""
        return json.dumps(self.to_dict(), indent=indent)


class MatteScorer:
    """Accumulates the per-image metrics of a split (``add`` per batch), then :meth:`result`."""

    def __init__(self, names: dict[int, str] | None = None) -> None:
        self.sums = dict.fromkeys(KEYS, 0.0)
        self.n = 0

    def add(self, batch: dict[str, Any], outputs: list[Tensor], *, input_hw: tuple[int, int]) -> None:
        """outputs: per image alpha Tensor[h, w]; ``batch`` holds ``ori_alpha`` / ``ratio_pad``."""
        for pred, gt, (ratio, pad) in zip(outputs, batch["ori_alpha"], batch["ratio_pad"], strict=True):
            full = to_original(pred.cpu(), input_hw=input_hw, ratio=float(ratio), pad=pad, orig_hw=tuple(gt.shape))
            err = matte_errors(full.clamp(0, 1), gt.float())
            for k in KEYS:
                self.sums[k] += err[k]
            self.n += 1

    def result(self, *, images: int, speed: dict[str, float], ms_per_image: float, losses: dict[str, float],
               save_dir: Path | None) -> MatteMetrics:
        mean = {k: self.sums[k] / self.n if self.n else 0.0 for k in KEYS}
        values = {**mean, "fitness": mean["iou"], "images": float(self.n), "ms_per_image": ms_per_image}
        return MatteMetrics(values, speed=speed, save_dir=save_dir, losses=losses)

    def summary(self, result: MatteMetrics) -> str:
        return result.summary()
