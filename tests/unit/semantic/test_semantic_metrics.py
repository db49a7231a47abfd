"""Semantic metrics against a case computed by hand, the ignore rule, and the scorer's mapping of
logits back through the letterbox."""

from __future__ import annotations

import math

import numpy as np
import pytest
import torch

from libreyolo.tasks.semantic.maps import to_original
from libreyolo.tasks.semantic.metrics import confusion, scores
from libreyolo.tasks.semantic.scoring import SemanticScorer

# 3 classes, 4x4 pixels, 255 ignored (two pixels)
TARGET = torch.tensor([[0, 0, 1, 1],
                       [0, 0, 1, 1],
                       [2, 2, 255, 1],
                       [2, 2, 255, 0]])
PRED = torch.tensor([[0, 1, 1, 1],
                     [0, 0, 1, 2],
                     [2, 0, 0, 1],
                     [2, 2, 2, 0]])


def test_confusion_and_scores_match_the_hand_computed_case() -> None:
    c = confusion(PRED, TARGET, 3)
    # rows = truth, columns = prediction; the two ignored pixels are not counted
    assert c.tolist() == [[4, 1, 0],
                          [0, 4, 1],
                          [1, 0, 3]]
    s = scores(c)
    # IoU_c = TP / (TP + FP + FN): 4 / (5 + 5 - 4), 4 / (5 + 5 - 4), 3 / (4 + 4 - 3)
    assert s["iou"] == pytest.approx([4 / 6, 4 / 6, 3 / 5])
    assert s["mIoU"] == pytest.approx((4 / 6 + 4 / 6 + 3 / 5) / 3)
    assert s["aAcc"] == pytest.approx(11 / 14)  # 11 right of the 14 scored pixels
    assert s["mAcc"] == pytest.approx((4 / 5 + 4 / 5 + 3 / 4) / 3)


def test_a_class_absent_everywhere_is_left_out_of_the_mean() -> None:
    c = confusion(torch.tensor([0, 0, 1]), torch.tensor([0, 0, 1]), 4)  # classes 2, 3 occur nowhere
    s = scores(c)
    assert math.isnan(s["iou"][2]) and math.isnan(s["iou"][3]) and s["mIoU"] == 1.0
    # a class predicted but absent from the truth counts, with IoU 0
    s2 = scores(confusion(torch.tensor([0, 3, 1]), torch.tensor([0, 0, 1]), 4))
    assert s2["iou"][3] == 0.0 and s2["mIoU"] == pytest.approx((0.5 + 1.0 + 0.0) / 3)


def test_to_original_cuts_the_padding_and_resizes_to_the_image() -> None:
    # an 8x16 image letterboxed into 16x16: resized 1x (ratio 1), padded 4 rows on top
    logits = torch.zeros(2, 16, 16)
    logits[1, 4:12, 8:] = 5.0  # class 1 on the right half of the image part
    logits[1, :4] = 9.0  # the padding says class 1 everywhere: it must not leak into the result
    out = to_original(logits, input_hw=(16, 16), ratio=1.0, pad=(0.0, 4.0), orig_hw=(8, 16))
    assert out.shape == (8, 16) and out.dtype == torch.int64
    assert torch.equal(out[:, 8:], torch.ones(8, 8, dtype=torch.int64)) and int(out[:, :8].sum()) == 0


def test_scorer_scores_in_original_pixels() -> None:
    nc = 3
    # logits at 1/4 of a 16x16 input that predict TARGET exactly once upsampled (per 4x4 block -> pixel)
    ori = TARGET.clone().masked_fill_(TARGET == 255, -1)
    logits = torch.nn.functional.one_hot(PRED, nc).permute(2, 0, 1).float() * 10
    big = logits.repeat_interleave(4, 1).repeat_interleave(4, 2)  # what the input-size logits would be
    scorer = SemanticScorer({0: "a", 1: "b", 2: "c"})
    batch = {"ori_mask": [ori], "ratio_pad": [(4.0, (0.0, 0.0))]}
    scorer.add(batch, [big], input_hw=(16, 16))
    m = scorer.result(images=1, speed={}, ms_per_image=0.0, losses={}, save_dir=None)
    assert m["mIoU"] == pytest.approx((4 / 6 + 4 / 6 + 3 / 5) / 3) and m["fitness"] == m["mIoU"]
    assert m.confusion_matrix.tolist() == [[4, 1, 0], [0, 4, 1], [1, 0, 3]]
    assert set(m.per_class) == {0, 1, 2} and m.per_class[2]["pixels"] == 4.0
    assert np.allclose(m.ious, [4 / 6, 4 / 6, 3 / 5]) and "all" in m.summary()
