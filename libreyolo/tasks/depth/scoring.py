"""Depth scoring in original image pixels: each image's predicted map goes back through its
letterbox (:func:`~.maps.to_original`, the same mapping as prediction), is aligned to the ground
truth (:func:`~.metrics.align_disparity`: least-squares scale and shift in disparity) and compared
with the depth as stored over the pixels that have one. Headline numbers: AbsRel, RMSE and
delta1 (:mod:`.metrics`), each the mean over the images; fitness (what training picks best.pt
by) is delta1.
"""

from __future__ import annotations

import json  # noqa: F401  (the examples use it)
from pathlib import Path
from typing import Any

from torch import Tensor

from ..base import TaskMetrics
from .maps import to_original
from .metrics import align_disparity, depth_errors

KEYS = ("abs_rel", "rmse", "delta1")


class DepthMetrics(TaskMetrics):
    """The result of a depth validation: a dict of ``abs_rel``, ``rmse``, ``delta1``, ``fitness``
    (= delta1), ``images`` (those with ground truth), ``ms_per_image``, with attached ``speed``,
    ``save_dir`` and ``losses``.

    Example:
        >>> m = DepthMetrics({"abs_rel": 0.125, "rmse": 0.5, "delta1": 0.875, "images": 2.0})
        >>> print(m.summary())
          images   AbsRel     RMSE   delta1  (after per-image scale+shift alignment in disparity)
               2    0.125    0.500    0.875
        >>> json.loads(m.to_json(indent=None))["metrics"]["delta1"]
        0.875
    """

    def summary(self) -> str:
        """One header line and one row."""
        return (f"{'images':>8} {'AbsRel':>8} {'RMSE':>8} {'delta1':>8}  (after per-image scale+shift alignment in "
                f"disparity)\n{int(self.get('images', 0)):>8} {self.get('abs_rel', 0.0):>8.3f} "
                f"{self.get('rmse', 0.0):>8.3f} {self.get('delta1', 0.0):>8.3f}")


class DepthScorer:
    """Accumulates the per-image errors of a split (``add`` per batch), then :meth:`result`."""

    def __init__(self, names: dict[int, str] | None = None) -> None:
        self.sums = dict.fromkeys(KEYS, 0.0)
        self.n = 0

    def add(self, batch: dict[str, Any], outputs: list[Tensor], *, input_hw: tuple[int, int]) -> None:
        """outputs: per image Tensor[h, w]; ``batch`` holds ``ori_depth`` / ``ratio_pad``."""
        for pred, gt, (ratio, pad) in zip(outputs, batch["ori_depth"], batch["ratio_pad"], strict=True):
            full = to_original(pred.cpu(), input_hw=input_hw, ratio=float(ratio), pad=pad, orig_hw=tuple(gt.shape))
            err = depth_errors(align_disparity(full, gt.float()), gt.float())
            if err is not None:
                for k in KEYS:
                    self.sums[k] += err[k]
                self.n += 1

    def result(self, *, images: int, speed: dict[str, float], ms_per_image: float, losses: dict[str, float],
               save_dir: Path | None) -> DepthMetrics:
        mean = {k: self.sums[k] / self.n if self.n else 0.0 for k in KEYS}
        values = {**mean, "fitness": mean["delta1"], "images": float(self.n), "ms_per_image": ms_per_image}
        return DepthMetrics(values, speed=speed, save_dir=save_dir, losses=losses)

    def summary(self, result: DepthMetrics) -> str:
        return result.summary()
