"""Keypoint (OKS) mAP on hand-made cases, the sigma choice, and the scorer on a batch."""

from __future__ import annotations

import numpy as np
import pytest
import torch

from libreyolo.ops.keypoints import COCO_SIGMAS, keypoint_similarity, loss_sigmas, metric_sigmas
from libreyolo.tasks.pose.scoring import PoseScorer, keypoint_map

GT_K = np.array([[[20.0, 20.0, 2], [60.0, 20.0, 2], [60.0, 60.0, 2], [20.0, 60.0, 2], [0.0, 0.0, 0]]])
BOX = np.array([[20.0, 20.0, 60.0, 60.0]])


def _image(pred_k: np.ndarray, *, score: float = 0.9) -> dict:
    return {"hw": (100, 100), "gt": BOX, "gt_cls": np.array([0]), "gt_kpts": GT_K, "pred": BOX,
            "score": np.array([score]), "pred_cls": np.array([0]), "pred_kpts": pred_k}


def _shift(dx: float) -> np.ndarray:
    p = GT_K.copy()
    p[..., 0] += dx
    p[..., 2] = 0.9
    return p


def test_perfect_prediction_scores_one_and_a_shift_scores_lower() -> None:
    sig = metric_sigmas(5)
    perfect = keypoint_map([_image(_shift(0.0))], {0: "a"}, sig)
    assert perfect == {"map": 1.0, "map50": 1.0}
    scores = [keypoint_map([_image(_shift(d))], {0: "a"}, sig)["map"] for d in (1.5, 2.0, 3.0, 12.0)]
    assert 1.0 > scores[0] > scores[1] > scores[2] > scores[3] == 0.0
    # OKS of a shift d on this 40 px square (area 0.53 * 40^2): exp(-d^2 / (2 * area * (2 sigma)^2));
    # mAP50-95 is the share of the ten thresholds 0.5..0.95 it clears
    area, k2 = 0.53 * 40 * 40, (2 * sig[0]) ** 2
    for d, s in zip((1.5, 2.0, 3.0), scores, strict=False):
        oks = float(np.exp(-d * d / (2 * area * k2)))
        assert s == pytest.approx(float((np.linspace(0.5, 0.95, 10) <= oks + 1e-12).mean()), abs=1e-6)


def test_unlabelled_keypoints_do_not_count_and_missing_predictions_cost_recall() -> None:
    far = _shift(0.0)
    far[0, 4, :2] = (95.0, 95.0)  # the unlabelled keypoint: anywhere
    assert keypoint_map([_image(far)], {0: "a"}, metric_sigmas(5))["map"] == 1.0
    two_gt = {**_image(_shift(0.0)), "gt": np.concatenate([BOX, BOX + 30]), "gt_cls": np.array([0, 0]),
              "gt_kpts": np.concatenate([GT_K, GT_K + [30.0, 30.0, 0]])}
    assert keypoint_map([two_gt], {0: "a"}, metric_sigmas(5))["map"] == pytest.approx(0.5, abs=0.02)


def test_sigma_choice() -> None:
    assert metric_sigmas(17) == list(COCO_SIGMAS) and metric_sigmas(4) == [pytest.approx(np.mean(COCO_SIGMAS), abs=1e-4)] * 4
    assert metric_sigmas(2, [0.1, 0.3]) == [0.1, 0.3] and loss_sigmas(4) == [0.25] * 4
    # wider sigmas forgive more: the same 2 px error scores higher with the dataset's own 0.1
    assert (keypoint_map([_image(_shift(2.0))], {0: "a"}, [0.1] * 5)["map"]
            > keypoint_map([_image(_shift(2.0))], {0: "a"}, metric_sigmas(5))["map"])
    g = torch.tensor([[[0.0, 0.0], [10.0, 0.0]]])
    sim = keypoint_similarity(g + torch.tensor([3.0, 4.0]), g, torch.tensor([100.0]), torch.tensor([0.5, 0.5]))
    assert torch.allclose(sim, torch.exp(torch.tensor(-25.0 / (2 * 100 * 1.0))).expand(1, 2))


def test_scorer_maps_labels_back_to_original_pixels() -> None:
    # one 100 x 100 image letterboxed to 50 x 50 (ratio 0.5, no pad); labels normalised to the input
    k = torch.from_numpy(GT_K.astype(np.float32)).clone()
    k[..., :2] /= 100.0  # original px -> input (x 0.5) -> normalised (/ 50)
    batch = {"batch_idx": torch.tensor([0]), "cls": torch.tensor([0]),
             "bboxes": torch.tensor([[0.4, 0.4, 0.4, 0.4]]), "keypoints": k, "ori_shape": [(100, 100)],
             "ratio_pad": [((0.5, 0.5), (0.0, 0.0))]}
    det = torch.tensor([[10.0, 10.0, 30.0, 30.0, 0.9, 0.0]])
    pred = torch.from_numpy(GT_K.astype(np.float32)).clone()
    pred[..., :2] *= 0.5
    pred[..., 2] = 0.9
    scorer = PoseScorer({0: "a"})
    scorer.add(batch, [(det, pred)], input_hw=(50, 50))
    m = scorer.result(images=1, speed={}, ms_per_image=0.0, losses={}, save_dir=None)
    assert m["kpt_mAP50-95"] == pytest.approx(1.0) and m["mAP50-95"] == pytest.approx(1.0)
    assert m["fitness"] == pytest.approx(1.0) and "keypoints" in scorer.summary(m)
