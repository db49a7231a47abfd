"""PP-OCR training loss: DB loss on the detector maps plus CTC on the recogniser.

DB targets (Liao et al., 2020, "Real-time Scene Text Detection with Differentiable Binarization",
section 3.3; PaddleOCR MakeShrinkMap / MakeBorderMap): each text polygon is shrunk by
``D = A (1 - r^2) / L`` (r = 0.4) for the shrink map (regions with a side under 8 px are ignored)
and dilated by ``D`` for the threshold map, whose value inside the dilated polygon is
``0.3 + 0.4 (1 - min(dist to the polygon's edges / D, 1))``. Loss: ``5 * BCE(shrink, with hard
negatives 3:1) + 10 * L1(threshold, in the dilated regions) + dice(binary)``.

CTC: the ground-truth quads are cropped from the batch (the same crops prediction reads) and the
recogniser's log-probabilities scored against the label strings (blank 0; characters outside the
dictionary are dropped; empty labels left out).
"""

from __future__ import annotations

from typing import Any

import numpy as np
import torch
import torch.nn.functional as F
from torch import Tensor

from ..._cv import cv2
from .postprocess import crop_regions

SHRINK_RATIO = 0.4
MIN_TEXT = 8.0
T_MIN, T_MAX = 0.3, 0.7


def offset_polygon(poly: np.ndarray, d: float) -> np.ndarray:
    """Move every edge of a convex polygon (float[k, 2]) inward by ``d`` pixels (outward for ``d < 0``).

    Example:
        >>> offset_polygon(np.array([[0, 0], [10, 0], [10, 10], [0, 10]], np.float64), 2).tolist()
        [[2.0, 2.0], [8.0, 2.0], [8.0, 8.0], [2.0, 8.0]]
    """
    p = np.asarray(poly, np.float64)
    k, c = len(p), p.mean(0)
    lines = []
    for i in range(k):
        a, b = p[i], p[(i + 1) % k]
        e = b - a
        n = np.array([-e[1], e[0]]) / max(np.hypot(*e), 1e-9)
        if np.dot(c - a, n) < 0:
            n = -n
        lines.append((a + d * n, e))
    out = []
    for i in range(k):
        (a1, e1), (a2, e2) = lines[i - 1], lines[i]
        den = e1[0] * e2[1] - e1[1] * e2[0]
        if abs(den) < 1e-9:
            out.append(a2)
            continue
        t = ((a2 - a1)[0] * e2[1] - (a2 - a1)[1] * e2[0]) / den
        out.append(a1 + t * e1)
    return np.asarray(out)


def _area_perimeter(poly: np.ndarray) -> tuple[float, float]:
    x, y = poly[:, 0], poly[:, 1]
    area = 0.5 * abs(float(np.dot(x, np.roll(y, -1)) - np.dot(y, np.roll(x, -1))))
    return area, float(np.linalg.norm(poly - np.roll(poly, -1, axis=0), axis=1).sum())


def _seg_dist(px: np.ndarray, py: np.ndarray, a: np.ndarray, b: np.ndarray) -> np.ndarray:
    e = b - a
    t = np.clip(((px - a[0]) * e[0] + (py - a[1]) * e[1]) / max(float(e @ e), 1e-9), 0, 1)
    return np.hypot(px - (a[0] + t * e[0]), py - (a[1] + t * e[1]))


def db_targets(polys: np.ndarray, hw: tuple[int, int]) -> tuple[np.ndarray, ...]:
    """polys (float[n, 4, 2] input pixels) -> (shrink map, shrink mask, threshold map, threshold
    mask), each float32[H, W].

    Example:
        >>> g, m, t, tm = db_targets(np.array([[[8, 8], [56, 8], [56, 24], [8, 24]]], np.float32), (32, 64))
        >>> float(g[16, 32]), float(g[0, 0]), float(m.min()), round(float(t[16, 32]), 2), float(tm[9, 9])
        (1.0, 0.0, 1.0, 0.3, 1.0)
    """
    h, w = hw
    gt, mask = np.zeros(hw, np.float32), np.ones(hw, np.float32)
    thr, tmask = np.zeros(hw, np.float32), np.zeros(hw, np.float32)
    for poly in np.asarray(polys, np.float64).reshape(-1, 4, 2):
        area, perim = _area_perimeter(poly)
        side = min(np.ptp(poly[:, 0]), np.ptp(poly[:, 1]))
        if area < 1 or perim < 1:
            continue
        if side < MIN_TEXT:
            cv2.fillPoly(mask, [poly.round().astype(np.int32)], 0.0)
            continue
        d = area * (1 - SHRINK_RATIO ** 2) / perim
        cv2.fillPoly(gt, [offset_polygon(poly, d).round().astype(np.int32)], 1.0)
        big = offset_polygon(poly, -d)
        cv2.fillPoly(tmask, [big.round().astype(np.int32)], 1.0)
        x0, y0 = np.floor(big.min(0)).astype(int).clip(0, [w - 1, h - 1])
        x1, y1 = np.ceil(big.max(0)).astype(int).clip(0, [w - 1, h - 1])
        py, px = np.mgrid[y0:y1 + 1, x0:x1 + 1].astype(np.float64)
        dist = np.min([_seg_dist(px, py, poly[i], poly[(i + 1) % 4]) for i in range(4)], axis=0)
        val = 1 - np.clip(dist / d, 0, 1)
        thr[y0:y1 + 1, x0:x1 + 1] = np.maximum(thr[y0:y1 + 1, x0:x1 + 1], val)
    return gt, mask, thr * (T_MAX - T_MIN) + T_MIN, tmask


def balanced_bce(pred: Tensor, gt: Tensor, mask: Tensor, ratio: float = 3.0) -> Tensor:
    pos, neg = gt * mask, (1 - gt) * mask
    n_pos = int(pos.sum())
    n_neg = min(int(neg.sum()), int(n_pos * ratio)) if n_pos else min(int(neg.sum()), 100)
    loss = F.binary_cross_entropy(pred.clamp(1e-6, 1 - 1e-6), gt, reduction="none")
    neg_loss = (loss * neg).flatten().topk(n_neg).values.sum() if n_neg else loss.sum() * 0
    return ((loss * pos).sum() + neg_loss) / (n_pos + n_neg + 1e-6)


def dice(pred: Tensor, gt: Tensor, mask: Tensor) -> Tensor:
    inter = (pred * gt * mask).sum()
    return 1 - 2 * inter / ((pred * mask).sum() + (gt * mask).sum() + 1e-6)


class OCRLoss:
    """``criterion(maps Tensor[B, 3, H, W], batch) -> (loss, items Tensor[4])``: shrink, threshold,
    binary (DB) and CTC terms; ``batch`` holds ``img`` (uint8), ``polys`` (per image float[n, 4, 2]
    input pixels) and ``texts`` (per image list of str)."""

    def __init__(self, family: Any) -> None:
        self.family = family
        self.index = {c: i + 1 for i, c in enumerate(family.chars)}

    def __call__(self, maps: Tensor, batch: dict[str, Any]) -> tuple[Tensor, Tensor]:
        dev = maps.device
        hw = tuple(maps.shape[2:])
        tg = [db_targets(np.asarray(p, np.float32), hw) for p in batch["polys"]]
        gt, mask, thr, tmask = (torch.from_numpy(np.stack([t[i] for t in tg])).to(dev) for i in range(4))
        maps = maps.float()
        l_shrink = balanced_bce(maps[:, 0], gt, mask)
        l_thresh = (maps[:, 1] - thr).abs().mul(tmask).sum() / (tmask.sum() + 1e-6)
        l_binary = dice(maps[:, 2], gt, mask)
        l_ctc = self.ctc(batch, dev)
        loss = 5 * l_shrink + 10 * l_thresh + l_binary + l_ctc
        return loss, torch.stack([l_shrink, l_thresh, l_binary, l_ctc]).detach()

    def ctc(self, batch: dict[str, Any], dev: torch.device) -> Tensor:
        quads, index, labels = [], [], []
        for b, (polys, texts) in enumerate(zip(batch["polys"], batch["texts"], strict=True)):
            for q, t in zip(np.asarray(polys, np.float32).reshape(-1, 4, 2), texts, strict=True):
                ids = [self.index[c] for c in t if c in self.index]
                if ids:
                    quads.append(q)
                    index.append(b)
                    labels.append(ids)
        rec = self.family.net.rec
        if not labels:
            return sum(p.sum() for p in rec.parameters()) * 0.0
        imgs = batch["img"].to(dev).float().div(255.0)
        crops = crop_regions(imgs, torch.tensor(index), torch.from_numpy(np.stack(quads)), tuple(self.family.net.rec_hw))
        logits = rec(crops)
        if not rec.training:  # validation losses: the eval forward returns probabilities
            logits = logits.clamp_min(1e-12).log()
        logp = logits.float().log_softmax(-1).transpose(0, 1)  # (T, N, C + 1)
        t = logp.shape[0]
        lengths = torch.tensor([min(len(x), t) for x in labels], dtype=torch.long)
        targets = torch.tensor([i for x in labels for i in x[:t]], dtype=torch.long)
        return F.ctc_loss(logp, targets, torch.full((len(labels),), t, dtype=torch.long), lengths, blank=0,
                          reduction="mean", zero_infinity=True)
