"""Detection scoring in original image pixels: predictions and ground truth are mapped back
through each image's letterbox (``ratio_pad``); the dataset hands ground truth over normalised to
the network input.

- mAP50-95 and mAP50: ``faster_coco_eval.COCOeval_faster`` (bbox, area "all", 100 detections
  per image and class as in COCO; classes without ground truth are left out).
- precision and recall: at the confidence that maximises the class-mean F1 at IoU 0.5, computed
  by :mod:`.metrics` over every kept detection (conf >= the validator's ``conf``, default 0.001).
- fitness (what training uses to pick best.pt): ``0.1 * mAP50 + 0.9 * mAP50-95``.
"""

from __future__ import annotations

import contextlib
import gc
import logging
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import numpy as np
import torch
from torch import Tensor

from ...ops.boxes import scale_boxes, xywh_to_xyxy
from . import metrics as M
from .results import DetMetrics

logger = logging.getLogger(__name__)


def fitness(m: dict[str, float]) -> float:
    return 0.1 * m["mAP50"] + 0.9 * m["mAP50-95"]


class DetectionScorer:
    """Gathers per-image predictions and ground truth (original pixels, xyxy) as numpy, then scores
    them (:meth:`result`: a :class:`~.results.DetMetrics`)."""

    def __init__(self, names: dict[int, str] | None = None) -> None:
        self.names = names or {}
        self.images: list[dict[str, Any]] = []
        self.per_class: dict[int, dict[str, float]] = {}
        self.curves: dict[str, np.ndarray] = {}
        self.confusion: np.ndarray | None = None

    def add(self, batch: dict[str, Any], dets: list[Tensor], *, input_hw: tuple[int, int]) -> None:
        h_in, w_in = input_hw
        bidx = batch["batch_idx"].cpu()
        cls = batch["cls"].cpu().view(-1)
        boxes = batch["bboxes"].cpu().float().view(-1, 4)
        for i, det in enumerate(dets):
            oh, ow = (int(v) for v in batch["ori_shape"][i])
            ratio, pad = _ratio_pad(batch["ratio_pad"][i])
            sel = bidx == i
            gt = xywh_to_xyxy(boxes[sel] * torch.tensor([w_in, h_in, w_in, h_in], dtype=torch.float32))
            gt = _unletterbox(gt, ratio, pad, (oh, ow))
            det = det.detach().float().cpu()
            pb = _unletterbox(det[:, :4], ratio, pad, (oh, ow))
            self.images.append({"hw": (oh, ow), "gt": gt.numpy(), "gt_cls": cls[sel].numpy().astype(int),
                                "pred": pb.numpy(), "score": det[:, 4].numpy(), "pred_cls": det[:, 5].numpy().astype(int)})

    add_batch = add

    def result(self, *, images: int, speed: dict[str, float], ms_per_image: float, losses: dict[str, float],
               save_dir: Path | None) -> DetMetrics:
        """The metrics of everything added (``images`` and ``ms_per_image`` as the loop measured)."""
        out = self.score(self.names)
        out["ms_per_image"] = ms_per_image
        return DetMetrics(out, names=self.names, per_class=self.per_class, confusion_matrix=self.confusion,
                          curves=self.curves, speed=speed, save_dir=save_dir, losses=losses)

    def summary(self, result: DetMetrics) -> str:
        return result.summary()

    def score(self, names: dict[int, str]) -> dict[str, float]:
        """The headline numbers; also fills ``per_class``, ``curves`` and ``confusion``."""
        gt_cls = np.concatenate([im["gt_cls"] for im in self.images]) if self.images else np.zeros(0, int)
        self.confusion = M.confusion_matrix(self.images, len(names))
        out = {"mAP50-95": 0.0, "mAP50": 0.0, "precision": 0.0, "recall": 0.0}
        out["images"] = float(len(self.images))
        out["instances"] = float(len(gt_cls))
        if len(gt_cls) == 0:
            logger.warning("val: the split has no labelled boxes; metrics are 0")
            out["fitness"] = 0.0
            return out
        coco = coco_map(self.images, names)
        out["mAP50-95"], out["mAP50"] = coco["map"], coco["map50"]
        self.per_class = coco["per_class"]
        parts = [M.match_image(im["pred"], im["score"], im["pred_cls"], im["gt"], im["gt_cls"]) for im in self.images]
        tp = np.concatenate([p[0] for p in parts]) if parts else np.zeros((0, 10), bool)
        pr = M.evaluate(tp, np.concatenate([p[1] for p in parts]), np.concatenate([p[2] for p in parts]), gt_cls)
        out["precision"], out["recall"] = pr.precision, pr.recall
        for k, c in enumerate(pr.classes):
            row = self.per_class.setdefault(int(c), {"ap50-95": 0.0, "ap50": 0.0})
            row.update(instances=float((gt_cls == c).sum()),
                       images=float(sum(bool((im["gt_cls"] == c).any()) for im in self.images)),
                       precision=float(pr.class_precision[k]), recall=float(pr.class_recall[k]))
        pr_classes = sorted(coco["pr50"])
        self.curves = {"classes": pr.classes, "conf": pr.conf_grid, "precision": pr.p_curve, "recall": pr.r_curve,
                       "f1": pr.f1_curve, "pr_recall": M.RECALL_POINTS, "pr_classes": np.array(pr_classes, dtype=int),
                       "pr_precision": (np.stack([coco["pr50"][c] for c in pr_classes]) if pr_classes
                                        else np.zeros((0, len(M.RECALL_POINTS))))}
        out["fitness"] = fitness(out)
        return out


def _ratio_pad(rp: Any) -> tuple[tuple[float, float], tuple[float, float]]:
    ratio, pad = rp
    ratio = tuple(float(r) for r in (ratio if isinstance(ratio, (tuple, list)) else (ratio,)))
    rw, rh = (ratio[0], ratio[1]) if len(ratio) > 1 else (ratio[0], ratio[0])
    return (rw, rh), (float(pad[0]), float(pad[1]))


def _unletterbox(boxes: Tensor, ratio: tuple[float, float], pad: tuple[float, float], hw: tuple[int, int]) -> Tensor:
    if ratio[0] == ratio[1]:
        return scale_boxes(boxes, ratio=ratio[0], pad=pad, orig_shape=hw)
    out = boxes.clone()
    out[:, [0, 2]] = ((out[:, [0, 2]] - pad[0]) / ratio[0]).clamp(0, hw[1])
    out[:, [1, 3]] = ((out[:, [1, 3]] - pad[1]) / ratio[1]).clamp(0, hw[0])
    return out


@contextlib.contextmanager
def gc_paused() -> Iterator[None]:
    """No cyclic garbage collection inside (restored on exit). Building the COCO structures
    allocates tens of thousands of small dicts and lists that all stay alive until the end, so
    each automatic collection re-scans everything built so far: with a model loaded that made
    a validation's scoring about twenty times slower. Nothing built here forms cycles. (The same
    switch as ``graphs.recovery.no_gc``, which the house floors keep out of reach of ``tasks``.)"""
    enabled = gc.isenabled()
    gc.disable()
    try:
        yield
    finally:
        if enabled:
            gc.enable()


@gc_paused()
def coco_map(images: list[dict[str, Any]], names: dict[int, str]) -> dict[str, Any]:
    """COCO bbox mAP with faster-coco-eval (cyclic garbage collection paused: :func:`gc_paused`).

    images: per image ``hw`` (h, w), ``gt`` (ndarray[G, 4] xyxy), ``gt_cls`` (ndarray[G]),
    ``pred`` (ndarray[K, 4] xyxy), ``score`` (ndarray[K]), ``pred_cls`` (ndarray[K]); original pixels.
    Returns {"map", "map50", "per_class": {cls: {"ap50-95", "ap50"}}, "pr50": {cls: ndarray[101]}}:
    ``pr50`` is the IoU-0.5 precision envelope at the 101 COCO recall points (its mean is ``ap50``).
    """
    from faster_coco_eval import COCO, COCOeval_faster

    quiet: Callable[..., None] = lambda *a, **k: None  # noqa: E731 - silence the package's printing
    gt = {"images": [], "annotations": [], "categories": [{"id": int(c) + 1, "name": n} for c, n in names.items()]}
    dts = []
    for img_id, im in enumerate(images, start=1):
        h, w = im["hw"]
        gt["images"].append({"id": img_id, "height": int(h), "width": int(w)})
        for box, c in zip(im["gt"], im["gt_cls"], strict=True):
            bw, bh = float(box[2] - box[0]), float(box[3] - box[1])
            gt["annotations"].append({"id": len(gt["annotations"]) + 1, "image_id": img_id, "category_id": int(c) + 1,
                                      "bbox": [float(box[0]), float(box[1]), bw, bh], "area": bw * bh, "iscrowd": 0})
        dts.extend(_coco_detections(img_id, im["pred"], im["score"], im["pred_cls"]))
    if not dts:
        return {"map": 0.0, "map50": 0.0, "per_class": {}, "pr50": {}}
    coco_gt = COCO(gt, print_function=quiet)
    coco_dt = coco_gt.loadRes(dts)
    ev = COCOeval_faster(coco_gt, coco_dt, iouType="bbox", print_function=quiet)
    ev.evaluate()
    ev.accumulate()
    ev.summarize()
    prec = np.asarray(ev.eval["precision"])  # (T, R, K, area, maxDets)
    per_class: dict[int, dict[str, float]] = {}
    pr50: dict[int, np.ndarray] = {}
    cat_ids = list(ev.params.catIds)
    for k, cat in enumerate(cat_ids):
        p = prec[:, :, k, 0, -1]
        if (p > -1).any():
            p50 = p[0][p[0] > -1]
            per_class[cat - 1] = {"ap50-95": float(p[p > -1].mean()), "ap50": float(p50.mean()) if p50.size else 0.0}
            pr50[cat - 1] = np.clip(p[0], 0.0, None)
    return {"map": max(float(ev.stats[0]), 0.0), "map50": max(float(ev.stats[1]), 0.0), "per_class": per_class,
            "pr50": pr50}


def _coco_detections(img_id: int, boxes: np.ndarray, scores: np.ndarray, classes: np.ndarray) -> list[dict[str, Any]]:
    """One image's detections as COCO result dicts (bbox ``[x, y, w, h]``, 1-based category id).

    Whole-array arithmetic in the boxes' own dtype, then ``tolist``: the same Python floats as
    converting each element (a validation at ``conf=0.001`` has tens of thousands of them).
    """
    boxes = np.asarray(boxes)
    if len(boxes) != len(scores) or len(boxes) != len(classes):
        raise ValueError(f"{len(boxes)} boxes, {len(scores)} scores and {len(classes)} classes")
    if not len(boxes):
        return []
    xywh = np.stack((boxes[:, 0], boxes[:, 1], boxes[:, 2] - boxes[:, 0], boxes[:, 3] - boxes[:, 1]), 1).tolist()
    cats = (np.asarray(classes).astype(np.int64) + 1).tolist()
    return [{"image_id": img_id, "category_id": c, "score": sc, "bbox": b}
            for b, sc, c in zip(xywh, np.asarray(scores).tolist(), cats, strict=True)]
