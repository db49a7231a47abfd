"""Detection metrics in plain numpy: COCO-style matching and 101-point AP, precision and recall.

This is an independent implementation of the COCO bbox protocol (area range "all", one
max-detections cap), used to cross-check faster-coco-eval in tests and to compute precision and
recall at the best-F1 confidence, which COCO's summary does not report.

Protocol: per image and class, detections sorted by score (highest first, at most ``max_dets``
per image) are matched greedily to the unmatched ground truth of highest IoU >= threshold.
Per class, the precision envelope is made non-increasing and sampled at the 101 recall points
0, 0.01, ..., 1 (precision 0 past the largest recall reached); AP is their mean. Classes without
ground truth are left out of the means.
"""

from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np

from ...ops.boxes import box_iou_np

IOU_THRESHOLDS = np.linspace(0.5, 0.95, 10)
RECALL_POINTS = np.linspace(0.0, 1.0, 101)


def match_image(pred_boxes: np.ndarray, pred_scores: np.ndarray, pred_cls: np.ndarray, gt_boxes: np.ndarray,
                gt_cls: np.ndarray, *, iou_thresholds: np.ndarray = IOU_THRESHOLDS,
                max_dets: int = 100) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Match one image's detections to its ground truth.

    Returns (tp (ndarray[K, T] bool), scores (ndarray[K]), classes (ndarray[K])) for the K kept
    detections (the ``max_dets`` highest-scoring of each class, as COCO does).
    """
    order = np.argsort(-pred_scores, kind="stable")
    boxes, scores, cls = pred_boxes[order], pred_scores[order], pred_cls[order]
    keep = np.zeros(len(order), dtype=bool)
    tp = np.zeros((len(order), len(iou_thresholds)), dtype=bool)
    for c in np.unique(cls):
        di = np.nonzero(cls == c)[0][:max_dets]  # score order; COCO caps per image and class
        keep[di] = True
        gi = np.nonzero(gt_cls == c)[0]
        if len(gi) == 0:
            continue
        ious = box_iou_np(boxes[di], gt_boxes[gi])
        _greedy_match(ious, di, tp, iou_thresholds)
    return tp[keep], scores[keep], cls[keep]


def _greedy_match(ious: np.ndarray, di: np.ndarray, tp: np.ndarray, iou_thresholds: np.ndarray) -> None:
    """Per threshold, walk the detections (rows of ``ious``, score order) and give each the
    untaken ground truth of highest IoU (the first on ties) if that IoU reaches the threshold;
    sets ``tp[di[row], t]``. An image has a handful of ground-truth boxes per class, so the walk
    runs on Python lists (numpy's per-call overhead on such short rows was most of the time);
    NaN IoUs take numpy's argmax semantics through :func:`_greedy_match_np`."""
    if np.isnan(ious).any():
        _greedy_match_np(ious, di, tp, iou_thresholds)
        return
    best = ious.max(1)
    rows_all = ious.tolist()
    n_gt = ious.shape[1]
    for t, thr in enumerate(iou_thresholds):
        th = min(float(thr), 1 - 1e-10)
        taken = [False] * n_gt
        left = n_gt
        for row in np.nonzero(best >= th)[0].tolist():  # others cannot match at thr
            r = rows_all[row]
            j, v = -1, -1.0
            for k in range(n_gt):
                if not taken[k] and r[k] > v:
                    j, v = k, r[k]
            if v >= th:
                taken[j] = True
                tp[di[row], t] = True
                left -= 1
                if not left:
                    break


def _greedy_match_np(ious: np.ndarray, di: np.ndarray, tp: np.ndarray, iou_thresholds: np.ndarray) -> None:
    best = ious.max(1)
    for t, thr in enumerate(iou_thresholds):
        taken = np.zeros(ious.shape[1], dtype=bool)
        for row in np.nonzero(best >= min(thr, 1 - 1e-10))[0]:
            if taken.all():
                break
            cand = np.where(taken, -1.0, ious[row])
            j = int(np.argmax(cand))
            if cand[j] >= min(thr, 1 - 1e-10):
                taken[j] = True
                tp[di[row], t] = True


def interpolated_ap(recall: np.ndarray, precision: np.ndarray) -> float:
    """COCO 101-point AP from a (recall, precision) curve in score order."""
    env = np.maximum.accumulate(precision[::-1])[::-1] if len(precision) else precision
    idx = np.searchsorted(recall, RECALL_POINTS, side="left")
    sampled = np.array([env[i] if i < len(env) else 0.0 for i in idx])
    return float(sampled.mean())


@dataclass(frozen=True, kw_only=True)
class DetectionMetrics:
    """Summary of :func:`evaluate`.

    ap (ndarray[C', T]) per evaluated class and IoU threshold; classes (ndarray[C']) their ids;
    precision / recall at the confidence that maximises the class-mean F1 (IoU 0.5), overall and
    per class (``class_precision`` / ``class_recall``, ndarray[C']). The curves behind them:
    ``conf_grid`` (ndarray[1000], 0..1) and ``p_curve`` / ``r_curve`` (ndarray[C', 1000]),
    precision and recall (IoU 0.5) of the detections scoring at least each confidence.
    """

    ap: np.ndarray
    classes: np.ndarray
    precision: float
    recall: float
    best_conf: float
    class_precision: np.ndarray = field(default_factory=lambda: np.zeros(0))
    class_recall: np.ndarray = field(default_factory=lambda: np.zeros(0))
    conf_grid: np.ndarray = field(default_factory=lambda: np.linspace(0, 1, 1000))
    p_curve: np.ndarray = field(default_factory=lambda: np.zeros((0, 1000)))
    r_curve: np.ndarray = field(default_factory=lambda: np.zeros((0, 1000)))

    @property
    def f1_curve(self) -> np.ndarray:
        """F1 (ndarray[C', 1000]) against ``conf_grid``."""
        return 2 * self.p_curve * self.r_curve / np.maximum(self.p_curve + self.r_curve, 1e-16)

    @property
    def map50(self) -> float:
        return float(self.ap[:, 0].mean()) if len(self.ap) else 0.0

    @property
    def map(self) -> float:
        return float(self.ap.mean()) if len(self.ap) else 0.0


def evaluate(tp: np.ndarray, scores: np.ndarray, pred_cls: np.ndarray, gt_cls: np.ndarray) -> DetectionMetrics:
    """Per-class AP and best-F1 precision/recall from matched detections of a whole dataset.

    tp (ndarray[K, T] bool), scores (ndarray[K]), pred_cls (ndarray[K]) concatenated over images
    (from :func:`match_image`); gt_cls (ndarray[G]) every ground-truth class id.
    """
    classes = np.unique(gt_cls).astype(int)
    t = tp.shape[1] if tp.ndim == 2 else len(IOU_THRESHOLDS)
    ap = np.zeros((len(classes), t))
    conf_grid = np.linspace(0, 1, 1000)
    p_curve = np.zeros((len(classes), len(conf_grid)))
    r_curve = np.zeros((len(classes), len(conf_grid)))
    order = np.argsort(-scores, kind="stable")
    tp, scores, pred_cls = tp[order], scores[order], pred_cls[order]
    for ci, c in enumerate(classes):
        sel = pred_cls == c
        n_gt = int((gt_cls == c).sum())
        if not sel.any():
            continue
        ctp = np.cumsum(tp[sel], 0)
        cfp = np.cumsum(~tp[sel], 0)
        rec = ctp / n_gt
        prec = ctp / (ctp + cfp)
        for j in range(t):
            ap[ci, j] = interpolated_ap(rec[:, j], prec[:, j])
        s = scores[sel]
        # precision / recall as functions of the confidence threshold (IoU 0.5); scores descend
        r_curve[ci] = np.interp(-conf_grid, -s, rec[:, 0], left=0)
        p_curve[ci] = np.interp(-conf_grid, -s, prec[:, 0], left=1)
    if len(classes) == 0:
        return DetectionMetrics(ap=ap, classes=classes, precision=0.0, recall=0.0, best_conf=0.0)
    f1 = 2 * p_curve * r_curve / np.maximum(p_curve + r_curve, 1e-16)
    best = int(f1.mean(0).argmax())
    return DetectionMetrics(ap=ap, classes=classes, precision=float(p_curve[:, best].mean()),
                            recall=float(r_curve[:, best].mean()), best_conf=float(conf_grid[best]),
                            class_precision=p_curve[:, best].copy(), class_recall=r_curve[:, best].copy(),
                            conf_grid=conf_grid, p_curve=p_curve, r_curve=r_curve)


def confusion_matrix(images: list[dict[str, np.ndarray]], nc: int, *, conf: float = 0.25,
                     iou: float = 0.45) -> np.ndarray:
    """Detection confusion matrix (ndarray[nc + 1, nc + 1], int64): ``[predicted, true]``.

    Index ``nc`` is the background. Per image, detections scoring at least ``conf`` are paired
    one-to-one with ground truth of IoU >= ``iou`` whatever their classes, the pairs of highest
    IoU first; a pair counts at ``[pred class, true class]``, an unpaired ground-truth box at
    ``[nc, true class]`` (missed) and an unpaired detection at ``[pred class, nc]`` (false alarm).
    ``images``: per image ``gt`` (ndarray[G, 4] xyxy), ``gt_cls`` (ndarray[G]), ``pred``
    (ndarray[K, 4] xyxy), ``score`` (ndarray[K]), ``pred_cls`` (ndarray[K]).

    Example:
        >>> im = {"gt": np.array([[0, 0, 10, 10]]), "gt_cls": np.array([1]),
        ...       "pred": np.array([[0, 0, 10, 9]]), "score": np.array([0.9]), "pred_cls": np.array([0])}
        >>> confusion_matrix([im], 2)[0, 1]
        1
    """
    m = np.zeros((nc + 1, nc + 1), dtype=np.int64)
    for im in images:
        keep = np.asarray(im["score"]) >= conf
        pb, pc = np.asarray(im["pred"], float).reshape(-1, 4)[keep], np.asarray(im["pred_cls"], int)[keep]
        gb, gc = np.asarray(im["gt"], float).reshape(-1, 4), np.asarray(im["gt_cls"], int)
        used_p, used_g = np.zeros(len(pb), bool), np.zeros(len(gb), bool)
        if len(pb) and len(gb):
            ious = box_iou_np(pb, gb)
            pi, gi = np.nonzero(ious >= iou)
            for k in np.argsort(-ious[pi, gi], kind="stable"):
                p, g = pi[k], gi[k]
                if not used_p[p] and not used_g[g]:
                    used_p[p] = used_g[g] = True
                    m[pc[p], gc[g]] += 1
        np.add.at(m, (nc, gc[~used_g]), 1)
        np.add.at(m, (pc[~used_p], nc), 1)
    return m
