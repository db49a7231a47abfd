"""OCR validation: detection precision / recall / hmean (ICDAR 2015 protocol: a prediction matches
an unmatched ground-truth region at polygon IoU >= 0.5, ``###`` regions neither count nor penalise)
and recognition accuracy (exact string match) and normalised edit distance (1 - mean of
``levenshtein / max(len)``, PaddleOCR's ``norm_edit_dis``) on the ground-truth crops. Fitness is hmean.
"""

from __future__ import annotations

import time
from typing import Any

import numpy as np

from ..._cv import cv2
from ...data.ocr import IGNORE

BOX_THRESH = 0.6  # DB box score threshold of validation (PaddleOCR's)


def quad_iou(a: np.ndarray, b: np.ndarray) -> float:
    """IoU of two convex quads (float[4, 2]).

    Example:
        >>> sq = np.array([[0, 0], [2, 0], [2, 2], [0, 2]], np.float32)
        >>> round(quad_iou(sq, sq + [1, 0]), 3)
        0.333
    """
    a, b = np.asarray(a, np.float32).reshape(4, 2), np.asarray(b, np.float32).reshape(4, 2)
    inter, _ = cv2.intersectConvexConvex(a, b)
    union = abs(cv2.contourArea(a)) + abs(cv2.contourArea(b)) - inter
    return float(inter / union) if union > 0 else 0.0


def edit_distance(a: str, b: str) -> int:
    """Levenshtein distance.

    Example:
        >>> edit_distance("kitten", "sitting")
        3
    """
    prev = list(range(len(b) + 1))
    for i, ca in enumerate(a, 1):
        cur = [i]
        for j, cb in enumerate(b, 1):
            cur.append(min(prev[j] + 1, cur[j - 1] + 1, prev[j - 1] + (ca != cb)))
        prev = cur
    return prev[-1]


def match_regions(pred: np.ndarray, gt: np.ndarray, ignore: np.ndarray, thr: float = 0.5) -> tuple[int, int, int]:
    """(true positives, counted predictions, counted ground truths) of one image, greedy by IoU."""
    pairs = sorted(((quad_iou(p, g), i, j) for i, p in enumerate(pred) for j, g in enumerate(gt)), reverse=True)
    used_p, used_g, tp = set(), set(), 0
    dropped = set()
    for v, i, j in pairs:
        if v < thr or i in used_p or j in used_g:
            continue
        used_p.add(i)
        used_g.add(j)
        if ignore[j]:
            dropped.add(i)
        else:
            tp += 1
    return tp, len(pred) - len(dropped), int((~ignore).sum())


class OcrScorer:
    def __init__(self, names: dict[int, str]) -> None:
        self.names = names
        self.tp = self.n_pred = self.n_gt = 0
        self.correct = self.n_rec = 0
        self.ned = 0.0
        self.t0 = time.perf_counter()

    def add(self, batch: dict[str, Any], outputs: list[tuple[Any, Any]], *, input_hw: tuple[int, int]) -> None:
        import torch

        if not outputs:
            return
        model = outputs[0][0]
        for b, (_, prob) in enumerate(outputs):
            quads, _, _ = model.find_boxes(prob[None], box_thresh=BOX_THRESH)
            gt = np.asarray(batch["polys"][b], np.float32).reshape(-1, 4, 2)
            ignore = np.array([t == IGNORE for t in batch["texts"][b]], bool)
            tp, npred, ngt = match_regions(quads.numpy(), gt, ignore)
            self.tp, self.n_pred, self.n_gt = self.tp + tp, self.n_pred + npred, self.n_gt + ngt
        quads, index, texts = [], [], []
        for b, (polys, words) in enumerate(zip(batch["polys"], batch["texts"], strict=True)):
            for q, t in zip(np.asarray(polys, np.float32).reshape(-1, 4, 2), words, strict=True):
                if t != IGNORE:
                    quads.append(q)
                    index.append(b)
                    texts.append(t)
        if not texts:
            return
        dev = outputs[0][1].device
        imgs = batch["img"].to(dev).float().div(255.0)
        crops = model.crop(imgs, torch.tensor(index), torch.from_numpy(np.stack(quads)))
        got, _ = model.recognise(crops)
        for g, t in zip(got, texts, strict=True):
            self.correct += int(g == t)
            self.ned += edit_distance(g, t) / max(len(g), len(t), 1)
            self.n_rec += 1

    def result(self, *, images: int, speed: dict[str, float], ms_per_image: float, losses: dict[str, float],
               save_dir: Any = None) -> OcrMetrics:
        p = self.tp / self.n_pred if self.n_pred else 0.0
        r = self.tp / self.n_gt if self.n_gt else 0.0
        h = 2 * p * r / (p + r) if p + r else 0.0
        acc = self.correct / self.n_rec if self.n_rec else 0.0
        ned = 1 - self.ned / self.n_rec if self.n_rec else 0.0
        values = {"precision": p, "recall": r, "hmean": h, "rec_acc": acc, "norm_edit_dis": ned, "fitness": h,
                  "images": float(images), "regions": float(self.n_gt), "ms_per_image": float(ms_per_image)}
        return OcrMetrics(values, speed=speed, save_dir=save_dir, losses=losses)

    def summary(self, m: OcrMetrics) -> str:
        return m.summary()


class OcrMetrics(dict):
    """The result of an OCR validation: a dict of ``precision``, ``recall``, ``hmean`` (= ``fitness``),
    ``rec_acc``, ``norm_edit_dis``, ``images``, ``regions``, with ``speed``, ``save_dir``, ``losses``.

    Example:
        >>> print(OcrMetrics({"precision": 1.0, "recall": 0.5, "hmean": 0.667, "rec_acc": 0.5, "norm_edit_dis": 0.75}).summary())
        P 1.000  R 0.500  hmean 0.667  rec_acc 0.500  1-NED 0.750
    """

    def __init__(self, values: dict[str, float], *, speed: dict[str, float] | None = None, save_dir: Any = None,
                 losses: dict[str, float] | None = None) -> None:
        super().__init__(values)
        self.speed = dict(speed or {})
        self.save_dir = save_dir
        self.losses = dict(losses or {})

    def summary(self) -> str:
        g = self.get
        return (f"P {g('precision', 0.0):.3f}  R {g('recall', 0.0):.3f}  hmean {g('hmean', 0.0):.3f}  "
                f"rec_acc {g('rec_acc', 0.0):.3f}  1-NED {g('norm_edit_dis', 0.0):.3f}")

    def to_dict(self) -> dict[str, Any]:
        return {"metrics": {k: float(v) for k, v in self.items()}, "speed": {k: float(v) for k, v in self.speed.items()},
                "losses": {k: float(v) for k, v in self.losses.items()},
                "save_dir": str(self.save_dir) if self.save_dir is not None else None}

    def to_json(self, *, indent: int | None = 2) -> str:
        import json

        return json.dumps(self.to_dict(), indent=indent)
