"""yolo9_pose: sizes and parameter counts, the keypoint decode, the loss (finite without
objects, decreasing on a fixed batch), postprocess, rebuilds for another keypoint count."""

from __future__ import annotations

import pytest
import torch
from _pose_checks import (
    check_keypoint_terms_decrease,
    check_loss_without_objects,
    check_postprocess_columns_and_arch,
)

from libreyolo.errors import ConfigError
from libreyolo.models.yolo9_pose.loss import YOLO9PoseLoss, assigned_rows
from libreyolo.models.yolo9_pose.nn import build_yolo9_pose, decode_keypoints
from libreyolo.ops.keypoints import keypoint_similarity

# nc=80, nkpt=17, unfused; box_groups=1 equals Ultralytics' yolov9{t,s}.yaml with a Pose(nc, [17, 3])
# head less its 16-value constant DFL projection (tests/unit/convert/test_yolo9_pose_ultralytics.py)
PARAMS = {("t", 4): 2_247_531, ("t", 1): 2_339_691, ("s", 4): 7_569_371, ("s", 1): 7_661_531}


@pytest.mark.parametrize(("size", "groups"), sorted(PARAMS))
def test_parameter_counts(size: str, groups: int) -> None:
    net = build_yolo9_pose(size=size, nc=80, nkpt=17, box_groups=groups)
    n = sum(p.numel() for p in net.parameters())
    assert abs(n - PARAMS[(size, groups)]) <= 0.03 * PARAMS[(size, groups)]
    assert n == PARAMS[(size, groups)]


def test_bad_build_arguments() -> None:
    with pytest.raises(ConfigError, match="no size 'c'"):
        build_yolo9_pose(size="c", nc=2)
    with pytest.raises(ConfigError, match="nkpt"):
        build_yolo9_pose(size="t", nc=2, nkpt=0)


def test_decode_is_relative_to_the_anchor_and_stride() -> None:
    raw = torch.tensor([[[0.25, -0.5, 0.0]]])  # one anchor, one keypoint
    k = decode_keypoints(raw, torch.tensor([[3.5, 1.5]]), torch.tensor([[16.0]]))
    assert k.tolist() == [[[(0.5 + 3.0) * 16, (-1.0 + 1.0) * 16, 0.5]]]


def test_loss_without_objects_is_finite_and_backpropagates() -> None:
    net = build_yolo9_pose(size="t", nc=2, nkpt=5).train()
    check_loss_without_objects(net, YOLO9PoseLoss(net))


def test_keypoint_terms_decrease_over_a_few_steps() -> None:
    torch.manual_seed(0)
    net = build_yolo9_pose(size="t", nc=2, nkpt=5).train()
    check_keypoint_terms_decrease(net, YOLO9PoseLoss(net))


def test_postprocess_columns_and_family_arch() -> None:
    check_postprocess_columns_and_arch("yolo9_pose", "t", levels_error="expects 3 levels")


def test_each_foreground_anchor_learns_the_keypoints_of_the_box_it_was_assigned() -> None:
    torch.manual_seed(0)
    net = build_yolo9_pose(size="t", nc=2, nkpt=3).train()
    crit = YOLO9PoseLoss(net)
    # image 0: two objects, image 1: one; the second object of image 0 and the one of image 1 overlap in place
    boxes = torch.tensor([[0.25, 0.25, 0.3, 0.3], [0.7, 0.7, 0.4, 0.4], [0.7, 0.7, 0.4, 0.4]])
    batch = {"batch_idx": torch.tensor([0, 0, 1]), "cls": torch.tensor([0, 1, 1]), "bboxes": boxes,
             "keypoints": torch.rand(3, 3, 3)}
    preds = net(torch.rand(2, 3, 64, 64))
    *_, ctx = crit.terms([p[:, :4 * 16 + 2] for p in preds], batch)
    t = ctx["assignment"]
    b, a, rows = assigned_rows(batch["batch_idx"], t.fg_mask, t.gt_idx)
    assert b.numel() > 0 and set(b.tolist()) == {0, 1}
    assert bool((batch["batch_idx"][rows] == b).all())  # an anchor's object is in its own image
    cx, cy, w, h = (boxes[rows] * 64).unbind(1)
    mine = torch.stack([cx - w / 2, cy - h / 2, cx + w / 2, cy + h / 2], 1)
    assert torch.allclose(t.bboxes[b, a].float(), mine, atol=1e-4)  # ...and the box it was assigned


def test_the_location_term_is_scale_free() -> None:
    g = torch.rand(4, 5, 2) * 50
    p = g + torch.randn(4, 5, 2)
    area, sig = torch.rand(4) * 900 + 100, torch.full((5,), 0.2)
    assert torch.allclose(keypoint_similarity(p, g, area, sig), keypoint_similarity(p * 3, g * 3, area * 9, sig))

