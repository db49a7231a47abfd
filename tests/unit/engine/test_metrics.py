"""mAP on hand-computed cases, and the numpy implementation against faster-coco-eval."""

from __future__ import annotations

import numpy as np
import pytest

from libreyolo.tasks.detect import metrics as M
from libreyolo.tasks.detect.scoring import coco_map

HAND_AP = (51 * 1.0 + 50 * (2 / 3)) / 101  # P/R curve (1, .5), (.5, .5), (.667, 1) -> 101-point AP


def _hand_image():
    gt = np.array([[0, 0, 10, 10], [20, 20, 30, 30]], dtype=float)
    pred = np.array([[0, 0, 10, 10], [50, 50, 60, 60], [20, 20, 30, 30]], dtype=float)  # TP, FP, TP
    return {"hw": (100, 100), "gt": gt, "gt_cls": np.array([0, 0]), "pred": pred,
            "score": np.array([0.9, 0.8, 0.7]), "pred_cls": np.array([0, 0, 0])}


def _numpy_map(images):
    parts = [M.match_image(im["pred"], im["score"], im["pred_cls"], im["gt"], im["gt_cls"]) for im in images]
    gt_cls = np.concatenate([im["gt_cls"] for im in images])
    return M.evaluate(np.concatenate([p[0] for p in parts]), np.concatenate([p[1] for p in parts]),
                      np.concatenate([p[2] for p in parts]), gt_cls)


def test_hand_computed_ap():
    res = _numpy_map([_hand_image()])
    assert res.map50 == pytest.approx(HAND_AP, abs=1e-12)
    assert res.map == pytest.approx(HAND_AP, abs=1e-12)
    # best F1 is at the lowest confidence: P = 2/3, R = 1 (F1 0.8) beats P = 1, R = 0.5
    assert res.precision == pytest.approx(2 / 3, abs=1e-3) and res.recall == pytest.approx(1.0, abs=1e-3)


def test_faster_coco_eval_agrees_on_hand_case():
    out = coco_map([_hand_image()], {0: "a"})
    assert out["map"] == pytest.approx(HAND_AP, abs=1e-6)
    assert out["map50"] == pytest.approx(HAND_AP, abs=1e-6)
    assert out["per_class"][0]["ap50-95"] == pytest.approx(HAND_AP, abs=1e-6)


def test_iou_threshold_sweep_hand_case():
    # one GT, one prediction of IoU 0.72: a hit for thresholds 0.5..0.7 (5 of 10) -> mAP50-95 = 0.5
    gt = np.array([[0, 0, 100, 100]], dtype=float)
    pred = np.array([[0, 0, 100, 72]], dtype=float)
    im = {"hw": (200, 200), "gt": gt, "gt_cls": np.array([1]), "pred": pred, "score": np.array([0.5]),
          "pred_cls": np.array([1])}
    res = _numpy_map([im])
    assert res.map50 == 1.0 and res.map == pytest.approx(0.5)
    out = coco_map([im], {0: "a", 1: "b"})
    assert out["map"] == pytest.approx(0.5, abs=1e-6) and list(out["per_class"]) == [1]


def test_numpy_map_matches_faster_coco_eval_on_random_scenes():
    rng = np.random.default_rng(0)
    images = []
    for _ in range(12):
        n = int(rng.integers(1, 6))
        xy = rng.uniform(0, 150, (n, 2))
        wh = rng.uniform(10, 60, (n, 2))
        gt = np.concatenate([xy, xy + wh], 1)
        gt_cls = rng.integers(0, 3, n)
        keep = rng.random(n) < 0.85
        pred = gt[keep] + rng.normal(0, 2, (int(keep.sum()), 4))
        pred_cls = gt_cls[keep].copy()
        extra = int(rng.integers(0, 4))
        exy = rng.uniform(0, 150, (extra, 2))
        pred = np.concatenate([pred, np.concatenate([exy, exy + 30], 1)])
        pred_cls = np.concatenate([pred_cls, rng.integers(0, 3, extra)])
        images.append({"hw": (240, 240), "gt": gt, "gt_cls": gt_cls, "pred": pred,
                       "score": rng.uniform(0.01, 1, len(pred)), "pred_cls": pred_cls})
    ours = _numpy_map(images)
    ref = coco_map(images, {0: "a", 1: "b", 2: "c"})
    assert 0.1 < ref["map"] < 0.95
    assert ours.map == pytest.approx(ref["map"], abs=1e-6)
    assert ours.map50 == pytest.approx(ref["map50"], abs=1e-6)


def test_no_detections_gives_zero():
    im = _hand_image()
    im.update(pred=np.zeros((0, 4)), score=np.zeros(0), pred_cls=np.zeros(0, int))
    assert coco_map([im], {0: "a"})["map"] == 0.0
    assert _numpy_map([im]).map == 0.0


def test_greedy_walk_on_lists_equals_the_numpy_walk():
    """The list-based matching gives the numpy walk's true positives, ties (duplicate ground
    truth, equal IoUs) and NaN IoUs included."""
    from libreyolo.tasks.detect.metrics import IOU_THRESHOLDS, _greedy_match, _greedy_match_np

    rng = np.random.default_rng(3)
    for trial in range(300):
        n, g = int(rng.integers(1, 40)), int(rng.integers(1, 6))
        ious = rng.choice([0.0, 0.3, 0.5, 0.55, 0.75, 0.9, 0.95, 1.0], size=(n, g))  # many exact ties
        if trial % 7 == 0:
            ious[:, -1] = ious[:, 0]  # a duplicated ground-truth box
        if trial % 11 == 0:
            ious[int(rng.integers(n)), int(rng.integers(g))] = np.nan
        di = np.arange(n)
        a = np.zeros((n, len(IOU_THRESHOLDS)), dtype=bool)
        b = np.zeros_like(a)
        _greedy_match(ious, di, a, IOU_THRESHOLDS)
        _greedy_match_np(ious, di, b, IOU_THRESHOLDS)
        assert np.array_equal(a, b), trial
    assert a.any()  # the scenes match something


def test_coco_detection_dicts_are_the_elementwise_conversion():
    from libreyolo.tasks.detect.scoring import _coco_detections, gc_paused

    rng = np.random.default_rng(0)
    boxes = rng.uniform(0, 600, (50, 4)).astype(np.float32)
    boxes[:, 2:] += boxes[:, :2]
    scores, classes = rng.random(50).astype(np.float32), rng.integers(0, 5, 50)
    want = [{"image_id": 7, "category_id": int(c) + 1, "score": float(s),
             "bbox": [float(b[0]), float(b[1]), float(b[2] - b[0]), float(b[3] - b[1])]}
            for b, s, c in zip(boxes, scores, classes, strict=True)]
    assert _coco_detections(7, boxes, scores, classes) == want
    assert _coco_detections(7, boxes[:0], scores[:0], classes[:0]) == []
    import gc

    assert gc.isenabled()
    with gc_paused():
        assert not gc.isenabled()
    assert gc.isenabled()
