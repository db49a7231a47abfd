"""Instance-segmentation scoring: box metrics as for detection, mask mAP through faster-coco-eval.

- Boxes: :class:`~libreyolo.tasks.detect.scoring.DetectionScorer` (original pixels, COCO bbox
  mAP50-95 / mAP50, precision and recall at the best F1): keys ``mAP50-95``, ``mAP50``,
  ``precision``, ``recall``.
- Masks: ``faster_coco_eval`` ``segm`` evaluation (area "all", 100 detections per image) of the
  predicted masks against the ground-truth masks, both at the prototype resolution of the
  letterboxed input (a quarter of it, where the dataset keeps its masks): keys ``mask_mAP50-95``,
  ``mask_mAP50``. COCO scores masks in original pixels; at a quarter of the input the IoU of thin
  or small instances is coarser (a documented deviation).
- fitness: the mean of the box fitness and the mask fitness (each ``0.1 * mAP50 + 0.9 * mAP50-95``).
"""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np
from torch import Tensor

from ..detect.results import DetMetrics
from ..detect.scoring import DetectionScorer, fitness


class SegmentScorer:
    """Gathers per-image detections and masks; :meth:`result` gives a
    :class:`~libreyolo.tasks.detect.results.DetMetrics` with the mask keys added."""

    def __init__(self, names: dict[int, str] | None = None) -> None:
        self.names = names or {}
        self.boxes = DetectionScorer(self.names)
        self.images: list[dict[str, Any]] = []

    def add(self, batch: dict[str, Any], outputs: list[tuple[Tensor, Tensor]], *, input_hw: tuple[int, int]) -> None:
        self.boxes.add(batch, [d for d, _ in outputs], input_hw=input_hw)
        bidx = batch["batch_idx"].cpu()
        cls = batch["cls"].cpu().view(-1)
        gt_masks = batch["masks"].cpu()
        for i, (det, masks) in enumerate(outputs):
            sel = bidx == i
            det = det.detach().float().cpu()
            self.images.append({"gt": gt_masks[sel].numpy().astype(np.uint8), "gt_cls": cls[sel].numpy().astype(int),
                                "pred": masks.detach().cpu().numpy().astype(np.uint8), "score": det[:, 4].numpy(),
                                "pred_cls": det[:, 5].numpy().astype(int), "hw": tuple(gt_masks.shape[1:])})

    def result(self, *, images: int, speed: dict[str, float], ms_per_image: float, losses: dict[str, float],
               save_dir: Path | None) -> DetMetrics:
        m = self.boxes.result(images=images, speed=speed, ms_per_image=ms_per_image, losses=losses, save_dir=save_dir)
        coco = mask_map(self.images, self.names) if int(m.get("instances", 0)) else {"map": 0.0, "map50": 0.0}
        m["mask_mAP50-95"], m["mask_mAP50"] = coco["map"], coco["map50"]
        box_fit = m.get("fitness", 0.0)
        m["fitness"] = 0.5 * (box_fit + fitness({"mAP50": m["mask_mAP50"], "mAP50-95": m["mask_mAP50-95"]}))
        return m

    def summary(self, result: DetMetrics) -> str:
        return (result.summary() + f"\n{'masks':>16}  mAP50 {result['mask_mAP50']:.3f}  "
                f"mAP50-95 {result['mask_mAP50-95']:.3f}")


def mask_map(images: list[dict[str, Any]], names: dict[int, str]) -> dict[str, float]:
    """COCO segm mAP with faster-coco-eval.

    images: per image ``hw`` (h, w of the mask grid), ``gt`` (ndarray[G, h, w] uint8), ``gt_cls``
    (ndarray[G]), ``pred`` (ndarray[K, h, w] uint8), ``score`` (ndarray[K]), ``pred_cls``
    (ndarray[K]). Returns {"map", "map50"}.

    Example:
        >>> m = np.zeros((1, 8, 8), np.uint8); m[0, 2:6, 2:6] = 1
        >>> im = {"hw": (8, 8), "gt": m, "gt_cls": np.array([0]), "pred": m, "score": np.array([0.9]),
        ...       "pred_cls": np.array([0])}
        >>> mask_map([im], {0: "a"})
        {'map': 1.0, 'map50': 1.0}
    """
    from faster_coco_eval import COCO, COCOeval_faster
    from faster_coco_eval.core import mask as mask_utils

    def rle(m: np.ndarray) -> dict[str, Any]:
        r = mask_utils.encode(np.asfortranarray(m.astype(np.uint8)))
        return {"size": [int(v) for v in r["size"]], "counts": r["counts"]}

    quiet: Callable[..., None] = lambda *a, **k: None  # noqa: E731 - silence the package's printing
    gt: dict[str, Any] = {"images": [], "annotations": [],
                          "categories": [{"id": int(c) + 1, "name": n} for c, n in names.items()]}
    dts = []
    for img_id, im in enumerate(images, start=1):
        h, w = im["hw"]
        gt["images"].append({"id": img_id, "height": int(h), "width": int(w)})
        for m, c in zip(im["gt"], im["gt_cls"], strict=True):
            ys, xs = np.nonzero(m)
            box = [float(xs.min()), float(ys.min()), float(np.ptp(xs) + 1), float(np.ptp(ys) + 1)] if len(xs) else [0.0] * 4
            gt["annotations"].append({"id": len(gt["annotations"]) + 1, "image_id": img_id, "category_id": int(c) + 1,
                                      "segmentation": rle(m), "area": float(m.sum()), "bbox": box, "iscrowd": 0})
        for m, s, c in zip(im["pred"], im["score"], im["pred_cls"], strict=True):
            dts.append({"image_id": img_id, "category_id": int(c) + 1, "score": float(s), "segmentation": rle(m)})
    if not dts or not gt["annotations"]:
        return {"map": 0.0, "map50": 0.0}
    coco_gt = COCO(gt, print_function=quiet)
    coco_dt = coco_gt.loadRes(dts)
    ev = COCOeval_faster(coco_gt, coco_dt, iouType="segm", print_function=quiet)
    ev.evaluate()
    ev.accumulate()
    ev.summarize()
    return {"map": max(float(ev.stats[0]), 0.0), "map50": max(float(ev.stats[1]), 0.0)}
