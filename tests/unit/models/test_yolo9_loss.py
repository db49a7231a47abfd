"""Hand-made cases for the YOLOv9 task-aligned assigner and each loss term."""

from __future__ import annotations

from types import SimpleNamespace

import pytest
import torch
import torch.nn.functional as F

from libreyolo.models.yolo9.loss import TaskAlignedAssigner, YOLO9Loss, build_targets, dfl_loss

ANCHORS = torch.tensor([[4.0, 4.0], [12.0, 4.0], [4.0, 12.0], [12.0, 12.0]])  # a 2x2 grid, stride 8


def _assign(pd_bboxes, gt_bboxes, *, topk=10, mask=None, labels=None, nc=2, scores=None):
    b, a = 1, ANCHORS.shape[0]
    m = gt_bboxes.shape[0]
    scores = scores if scores is not None else torch.full((b, a, nc), 0.5)
    labels = labels if labels is not None else torch.zeros(m, dtype=torch.long)
    mask = mask if mask is not None else torch.ones(m, dtype=torch.bool)
    return TaskAlignedAssigner(nc=nc, topk=topk)(scores, pd_bboxes[None], ANCHORS, labels[None],
                                                 gt_bboxes[None], mask[None])


def test_assigner_best_anchor_gets_target_equal_to_its_iou():
    gt = torch.tensor([[0.0, 0.0, 16.0, 16.0]])
    pd = torch.tensor([[0.0, 0.0, 16.0, 16.0], [2.0, 2.0, 14.0, 14.0], [0.0, 0.0, 8.0, 8.0], [8.0, 8.0, 16.0, 16.0]])
    t = _assign(pd, gt, topk=1, labels=torch.tensor([1]))
    assert t.fg_mask[0].tolist() == [True, False, False, False]  # only the top-1 aligned anchor
    assert t.labels[0, 0].item() == 1
    assert torch.allclose(t.bboxes[0, 0], gt[0])
    # normalised soft target: best anchor's IoU (1.0) on its class, zero elsewhere
    assert torch.allclose(t.scores[0, 0], torch.tensor([0.0, 1.0]), atol=1e-5)
    assert t.scores[0, 1:].abs().sum() == 0


def test_assigner_centres_outside_box_are_never_positive():
    gt = torch.tensor([[0.0, 0.0, 8.0, 8.0]])  # contains only the anchor at (4, 4)
    pd = torch.tensor([[0.0, 0.0, 8.0, 8.0]] * 4)  # every anchor predicts the GT perfectly
    t = _assign(pd, gt, topk=10)
    assert t.fg_mask[0].tolist() == [True, False, False, False]


def test_assigner_soft_targets_scale_with_alignment():
    gt = torch.tensor([[0.0, 0.0, 16.0, 16.0]])
    pd = torch.tensor([[0.0, 0.0, 16.0, 16.0], [0.0, 0.0, 16.0, 12.0], [0.0, 0.0, 16.0, 16.0], [0.0, 0.0, 16.0, 16.0]])
    scores = torch.tensor([[[0.9, 0.0], [0.9, 0.0], [0.1, 0.0], [0.9, 0.0]]])
    t = _assign(pd, gt, topk=4, scores=scores)
    assert t.fg_mask.all()
    s = t.scores[0, :, 0]
    # anchors 0 and 3 are the best aligned (score 0.9, IoU 1) -> target 1; the others less
    assert torch.allclose(s[[0, 3]], torch.ones(2), atol=1e-5)
    align = torch.tensor([0.9, 0.9, 0.1, 0.9]).sqrt()  # alpha = 0.5, IoU = 1 for anchors 0, 2, 3
    assert s[2].item() == pytest.approx((align[2] / align[0]).item(), rel=1e-4)
    assert 0 < s[1].item() < 1


def test_assigner_anchor_claimed_twice_goes_to_highest_overlap():
    gt = torch.tensor([[0.0, 0.0, 16.0, 16.0], [0.0, 0.0, 9.0, 9.0]])
    pd = torch.tensor([[0.0, 0.0, 9.0, 9.0]] * 4)  # matches GT 1 perfectly
    t = _assign(pd, gt, topk=10, labels=torch.tensor([0, 1]))
    assert t.fg_mask[0, 0] and t.gt_idx[0, 0].item() == 1 and t.labels[0, 0].item() == 1
    assert t.fg_mask[0, 1:].all() and (t.gt_idx[0, 1:] == 0).all()


def test_assigner_padded_and_empty_gt():
    gt = torch.tensor([[0.0, 0.0, 16.0, 16.0]])
    pd = torch.tensor([[0.0, 0.0, 16.0, 16.0]] * 4)
    t = _assign(pd, gt, mask=torch.tensor([False]))
    assert not t.fg_mask.any() and t.scores.abs().sum() == 0
    t0 = TaskAlignedAssigner(nc=2)(torch.rand(2, 4, 2), torch.rand(2, 4, 4), ANCHORS, torch.zeros(2, 0, dtype=torch.long),
                                   torch.zeros(2, 0, 4), torch.zeros(2, 0, dtype=torch.bool))
    assert not t0.fg_mask.any() and t0.scores.shape == (2, 4, 2) and (t0.labels == 2).all()


def test_dfl_loss_integer_and_fractional_targets():
    logits = torch.randn(3, 4, 16)
    target = torch.full((3, 4), 5.0)
    ce5 = F.cross_entropy(logits.view(-1, 16), torch.full((12,), 5), reduction="none").view(3, 4).mean(-1)
    assert torch.allclose(dfl_loss(logits, target), ce5, atol=1e-6)
    half = torch.full((3, 4), 5.5)
    ce6 = F.cross_entropy(logits.view(-1, 16), torch.full((12,), 6), reduction="none").view(3, 4).mean(-1)
    assert torch.allclose(dfl_loss(logits, half), (ce5 + ce6) / 2, atol=1e-6)


def test_build_targets_pads_per_image():
    batch = {"batch_idx": torch.tensor([1, 0, 1]), "cls": torch.tensor([2, 1, 0]),
             "bboxes": torch.tensor([[0.5, 0.5, 0.5, 0.5], [0.25, 0.25, 0.5, 0.5], [0.5, 0.5, 1.0, 1.0]])}
    labels, boxes, mask = build_targets(batch, batch_size=3, img_hw=(32, 64), device=torch.device("cpu"))
    assert labels.tolist() == [[1, 0], [2, 0], [0, 0]]
    assert mask.tolist() == [[True, False], [True, True], [False, False]]
    assert torch.allclose(boxes[0, 0], torch.tensor([0.0, 0.0, 32.0, 16.0]))
    assert torch.allclose(boxes[1, 1], torch.tensor([0.0, 0.0, 64.0, 32.0]))


NET = SimpleNamespace(nc=2, reg_max=16, strides=(8, 16, 32))


def _preds(b=2, hw=64, fill=0.0):
    return [torch.full((b, 4 * 16 + 2, hw // s, hw // s), fill, requires_grad=True) for s in (8, 16, 32)]


def test_loss_without_boxes_is_only_class_loss():
    preds = _preds(b=2)
    batch = {"batch_idx": torch.zeros(0, dtype=torch.long), "cls": torch.zeros(0, dtype=torch.long),
             "bboxes": torch.zeros(0, 4)}
    loss, items = YOLO9Loss(NET)(preds, batch)
    a = 64 + 16 + 4
    bce0 = torch.log(torch.tensor(2.0)).item()  # BCE(logit 0, target 0)
    assert items[0] == 0 and items[2] == 0
    assert items[1].item() == pytest.approx(0.5 * 2 * a * 2 * bce0, rel=1e-5)  # sum / max(sum(targets), 1)
    assert loss.item() == pytest.approx(items.sum().item() * 2, rel=1e-6)
    loss.backward()
    assert all(p.grad is not None for p in preds)


def test_loss_gains_and_perfect_box_prediction():
    # one 16x16 box at stride 8 on a 64 px image; predict it exactly from every level-0 anchor
    b, hw = 1, 64
    preds = [torch.zeros(b, 66, hw // s, hw // s) for s in (8, 16, 32)]
    box = torch.tensor([16.0, 16.0, 32.0, 32.0])
    p0 = preds[0]
    for gy in range(8):
        for gx in range(8):
            cx, cy = gx + 0.5, gy + 0.5
            d = torch.tensor([cx - box[0] / 8, cy - box[1] / 8, box[2] / 8 - cx, box[3] / 8 - cy])
            if (d > 0).all():
                for side in range(4):  # a distance of k.5 bins: equal mass on bins k and k+1
                    k = int(d[side].floor())
                    p0[0, side * 16 + k, gy, gx] = 30.0
                    p0[0, side * 16 + k + 1, gy, gx] = 30.0
    batch = {"batch_idx": torch.tensor([0]), "cls": torch.tensor([1]), "bboxes": torch.tensor([[0.375, 0.375, 0.25, 0.25]])}
    crit = YOLO9Loss(NET)
    loss, items = crit(preds, batch)
    assert items[0].item() < 1e-4  # CIoU loss vanishes for an exact box
    assert items[2].item() == pytest.approx(1.5 * torch.log(torch.tensor(2.0)).item(), rel=1e-3)  # DFL floor: 2 bins at 1/2
    crit.hyp.update(box=1.0, cls=1.0, dfl=1.0)
    _, raw = crit(preds, batch)
    assert torch.allclose(items, raw * torch.tensor([7.5, 0.5, 1.5]), rtol=1e-5, atol=1e-7)
    # a shifted prediction costs more box loss
    shifted = [p.clone() for p in preds]
    shifted[0] = torch.roll(shifted[0], shifts=1, dims=3)
    _, worse = crit(shifted, batch)
    assert worse[0] > raw[0] + 0.05


def test_training_after_an_inference_mode_call_reuses_caches_safely():
    """The anchor and gain caches filled under inference_mode (e.g. a validation loss) must not
    hand inference tensors to a later training step."""
    from benchmarks.references.yolo9_loss import NET, make_batch, make_preds
    from libreyolo.models.yolo9.loss import YOLO9Loss

    crit = YOLO9Loss(NET)
    batch = make_batch(counts=[2, 3], nc=NET.nc, seed=2)
    with torch.inference_mode():
        crit(make_preds(batch=2, imgsz=96, nc=NET.nc, reg_max=NET.reg_max, seed=0, requires_grad=False), batch)
    preds = make_preds(batch=2, imgsz=96, nc=NET.nc, reg_max=NET.reg_max, seed=0, requires_grad=True)
    loss, _ = crit(preds, batch)
    loss.backward()
    assert all(p.grad is not None and torch.isfinite(p.grad).all() for p in preds)
