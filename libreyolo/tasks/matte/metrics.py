"""Matte metrics of a predicted alpha against the ground truth, per image (the dichotomous-segmentation
protocol of DIS5K / salient-object benchmarks):

- MAE: ``mean |alpha - gt|`` over all pixels (no threshold);
- IoU: of the two masks thresholded at 0.5 (1 when both are empty);
- F-measure: ``(1 + b2) P R / (b2 P + R)`` with ``b2 = 0.3``, precision and recall of the masks at 0.5
  (1 when both are empty, 0 when only one is);
- S-measure (Fan et al., ICCV 2017, alpha = 0.5): the mean of an object-aware term (a
  foreground / background similarity of the prediction's mean and spread inside and outside the
  object) and a region-aware term (an SSIM-like score of four quadrants around the object's
  centroid, weighted by area); against an empty ground truth it is ``1 - mean(alpha)``, against a
  full one ``mean(alpha)``.
"""

from __future__ import annotations

import numpy as np
import torch  # noqa: F401 - the docstring examples use it
from torch import Tensor

EPS = float(np.finfo(np.float64).eps)
BETA2 = 0.3


def _object(x: np.ndarray, on: np.ndarray) -> float:
    v = x[on]
    if v.size == 0:
        return 0.0
    mean, std = float(v.mean()), float(v.std(ddof=1)) if v.size > 1 else 0.0
    return 2.0 * mean / (mean * mean + 1.0 + std + EPS)


def _ssim(p: np.ndarray, g: np.ndarray) -> float:
    n = p.size
    if n == 0:
        return 0.0
    x, y = float(p.mean()), float(g.mean())
    sx, sy = float(((p - x) ** 2).sum() / (n - 1 + EPS)), float(((g - y) ** 2).sum() / (n - 1 + EPS))
    sxy = float(((p - x) * (g - y)).sum() / (n - 1 + EPS))
    a, b = 4.0 * x * y * sxy, (x * x + y * y) * (sx + sy)
    if a != 0:
        return a / (b + EPS)
    return 1.0 if b == 0 else 0.0


def s_measure(pred: np.ndarray, gt: np.ndarray, alpha: float = 0.5) -> float:
    """S-measure of ``pred`` (ndarray[H, W] in [0, 1]) against the binary ``gt`` (bool ndarray[H, W]).

    Example:
        >>> g = np.zeros((8, 8), bool); g[2:6, 2:6] = True
        >>> round(s_measure(g.astype(float), g), 6), s_measure(np.zeros((8, 8)), g) < 0.5
        (1.0, True)
    """
    y = float(gt.mean())
    if y == 0:
        return 1.0 - float(pred.mean())
    if y == 1:
        return float(pred.mean())
    so = y * _object(pred, gt) + (1 - y) * _object(1.0 - pred, ~gt)
    h, w = gt.shape
    cy, cx = (int(v) + 1 for v in np.argwhere(gt).mean(axis=0).round())
    g = gt.astype(np.float64)
    sr = 0.0
    for ys, xs in ((slice(0, cy), slice(0, cx)), (slice(0, cy), slice(cx, w)), (slice(cy, h), slice(0, cx)),
                   (slice(cy, h), slice(cx, w))):
        part = g[ys, xs]
        sr += part.size / (h * w) * _ssim(pred[ys, xs], part)
    return float(max(0.0, alpha * so + (1 - alpha) * sr))


def matte_errors(alpha: Tensor, gt: Tensor) -> dict[str, float]:
    """``{"mae", "iou", "fmeasure", "smeasure"}`` of ``alpha`` against ``gt`` (Tensor[H, W] in [0, 1] each).

    Example:
        >>> gt = torch.zeros(4, 4); gt[:2] = 1.0
        >>> {k: round(v, 4) for k, v in matte_errors(gt.clone(), gt).items()}
        {'mae': 0.0, 'iou': 1.0, 'fmeasure': 1.0, 'smeasure': 1.0}
    """
    p, g = alpha.double().clamp(0, 1), gt.double().clamp(0, 1)
    pm, gm = p >= 0.5, g >= 0.5
    inter, pn, gn = float((pm & gm).sum()), float(pm.sum()), float(gm.sum())
    union = pn + gn - inter
    iou = inter / union if union > 0 else 1.0
    if pn == 0 and gn == 0:
        f = 1.0
    else:
        prec, rec = inter / pn if pn else 0.0, inter / gn if gn else 0.0
        f = (1 + BETA2) * prec * rec / (BETA2 * prec + rec) if prec + rec > 0 else 0.0
    return {"mae": float((p - g).abs().mean()), "iou": iou, "fmeasure": f,
            "smeasure": s_measure(p.numpy(), gm.numpy())}

