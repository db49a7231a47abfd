"""Restoration scoring: PSNR and SSIM (:mod:`.metrics`) of each validation image, averaged.

Each output is quantised to 8-bit levels (what a saved picture holds) and compared with the HQ
patch as stored, on the part that is image (``valid`` x scale; edge padding of a small image is
left out). Fitness (what training picks best.pt by) is the mean PSNR.
"""

from __future__ import annotations

import json  # noqa: F401  (the examples use it)
import math
from pathlib import Path
from typing import Any

from torch import Tensor

from ...errors import DatasetError
from ..base import TaskMetrics
from .metrics import psnr, quantise, ssim


class RestoreMetrics(TaskMetrics):
    """The result of a restoration validation: a dict of ``psnr`` (dB), ``ssim``, ``fitness``
    (= psnr), ``images``, ``ms_per_image``, with attached ``speed``, ``save_dir`` and ``losses``.

    Example:
        >>> m = RestoreMetrics({"psnr": 31.25, "ssim": 0.9, "fitness": 31.25, "images": 2.0})
        >>> print(m.summary())
        images 2  PSNR 31.25 dB  SSIM 0.9000
        >>> json.loads(m.to_json(indent=None))["metrics"]["psnr"]
        31.25
    """

    def summary(self) -> str:
        """One line: images, mean PSNR, mean SSIM."""
        return f"images {int(self.get('images', 0))}  PSNR {self.get('psnr', 0.0):.2f} dB  SSIM {self.get('ssim', 0.0):.4f}"

MAX_PSNR = 100.0  # an identical image counts as 100 dB in the mean (PSNR itself is infinite)

class RestoreScorer:
    """Accumulates per-image PSNR and SSIM of a split (``add`` per batch), then :meth:`result`."""

    def __init__(self, names: dict[int, str] | None = None) -> None:
        self.psnr: list[float] = []
        self.ssim: list[float] = []

    def add(self, batch: dict[str, Any], outputs: list[Tensor], *, input_hw: tuple[int, int]) -> None:
        """outputs: per image Tensor[3, s*S, s*S] in [0, 1]; ``batch`` holds ``target`` and ``valid``."""
        for out, target, (h, w) in zip(outputs, batch["target"], batch["valid"], strict=True):
            if tuple(out.shape) != tuple(target.shape):
                raise DatasetError(f"the model returns {tuple(out.shape[1:])} images but the dataset's HQ patches are "
                                   f"{tuple(target.shape[1:])}: the dataset's 'scale' must be the model's")
            k = target.shape[1] // input_hw[0]
            a = quantise(out[:, :h * k, :w * k]).cpu()
            b = target[:, :h * k, :w * k].float().cpu() / 255.0
            self.psnr.append(min(psnr(a, b), MAX_PSNR))
            self.ssim.append(ssim(a, b) if min(a.shape[1:]) >= 11 else math.nan)

    def result(self, *, images: int, speed: dict[str, float], ms_per_image: float, losses: dict[str, float],
               save_dir: Path | None) -> RestoreMetrics:
        n = max(len(self.psnr), 1)
        ok = [s for s in self.ssim if not math.isnan(s)]
        p = sum(self.psnr) / n
        values = {"psnr": p, "ssim": sum(ok) / len(ok) if ok else 0.0, "fitness": p, "images": float(images),
                  "ms_per_image": ms_per_image}
        return RestoreMetrics(values, speed=speed, save_dir=save_dir, losses=losses)

    def summary(self, result: RestoreMetrics) -> str:
        return result.summary()
