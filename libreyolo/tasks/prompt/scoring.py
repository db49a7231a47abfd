"""Promptable-segmentation scoring: every ground-truth instance is prompted twice, by its box and
by its box centre (a foreground point), on the image embedding of its image; the predicted mask
(the single-mask output, logits > 0, at a quarter of the square input: the grid the dataset's
instance masks are stored at) is compared with the instance mask. Headline numbers: ``mIoU_box``
and ``mIoU_point`` (means over the prompts); fitness (what training picks best.pt by) is
``mIoU_box``.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import torch
import torch.nn.functional as F

from ..base import TaskMetrics

KEYS = ("mIoU_box", "mIoU_point")


class PromptMetrics(TaskMetrics):
    """The result of a prompt validation: ``mIoU_box``, ``mIoU_point``, ``fitness`` (= mIoU_box),
    ``prompts`` (instances scored), ``images``, ``ms_per_image``; with ``speed``, ``save_dir``, ``losses``.

    Example:
        >>> print(PromptMetrics({"mIoU_box": 0.75, "mIoU_point": 0.5, "prompts": 4.0, "images": 2.0}).summary())
          images  prompts  mIoU(box)  mIoU(point)
               2        4      0.750        0.500
    """

    def summary(self) -> str:
        return (f"{'images':>8} {'prompts':>8} {'mIoU(box)':>10} {'mIoU(point)':>12}\n"
                f"{int(self.get('images', 0)):>8} {int(self.get('prompts', 0)):>8} "
                f"{self.get('mIoU_box', 0.0):>10.3f} {self.get('mIoU_point', 0.0):>12.3f}")

class PromptScorer:
    """Accumulates the IoU of each prompted instance (``add`` per batch), then :meth:`result`."""

    def __init__(self, names: dict[int, str] | None = None) -> None:
        self.ious: dict[str, list[float]] = {k: [] for k in KEYS}
        self.images = 0

    def add(self, batch: dict[str, Any], outputs: list[Any], *, input_hw: tuple[int, int]) -> None:
        """outputs: per image ``(model, embedding Tensor[1, C, h, w])`` (:meth:`PromptTask.val_outputs`)."""
        from ...models._sam.family import box_prompts
        from ...models._sam.loss import mask_iou
        from ...models._sam.prompt import Prompts

        idx = batch["batch_idx"].long()
        for i, (model, emb) in enumerate(outputs):
            self.images += 1
            sel = idx == i
            if not bool(sel.any()):
                continue
            boxes = box_prompts(batch["bboxes"][sel], int(input_hw[1])).to(emb.device)
            centres = ((boxes[:, :2] + boxes[:, 2:]) / 2)[:, None]  # (P, 1, 2)
            gt = batch["masks"][sel].to(emb.device) > 0
            for key, prompts in (("mIoU_box", Prompts(boxes=boxes)),
                                 ("mIoU_point", Prompts(points=centres, labels=torch.ones(len(boxes), 1, dtype=torch.int64,
                                                                                         device=emb.device)))):
                masks, _ = model.decode_prompts(emb, prompts)
                logits = masks[0, :, 0].float()
                if tuple(logits.shape[1:]) != tuple(gt.shape[1:]):
                    logits = F.interpolate(logits[:, None], size=tuple(gt.shape[1:]), mode="bilinear",
                                           align_corners=False)[:, 0]
                self.ious[key] += mask_iou(logits > 0, gt).cpu().tolist()

    def result(self, *, images: int, speed: dict[str, float], ms_per_image: float, losses: dict[str, float],
               save_dir: Path | None) -> PromptMetrics:
        mean = {k: sum(v) / len(v) if v else 0.0 for k, v in self.ious.items()}
        values = {**mean, "fitness": mean["mIoU_box"], "prompts": float(len(self.ious["mIoU_box"])),
                  "images": float(self.images), "ms_per_image": ms_per_image}
        return PromptMetrics(values, speed=speed, save_dir=save_dir, losses=losses)

    def summary(self, result: PromptMetrics) -> str:
        return result.summary()
