"""Depth metrics and loss on known inputs (issue 23): the disparity alignment undoes any scale and
shift, AbsRel / RMSE / delta1 by hand, the scorer through the letterbox, and the
scale-and-shift-invariant loss (zero for an affine disparity, positive otherwise, gradients flow)."""

from __future__ import annotations

import math

import pytest
import torch

from libreyolo.models._base.depth import SSILoss
from libreyolo.tasks.depth.metrics import align_disparity, depth_errors
from libreyolo.tasks.depth.scoring import DepthScorer


def _gt() -> torch.Tensor:
    g = torch.linspace(1.0, 10.0, 48).view(6, 8)
    g[0, :3] = 0.0  # pixels without depth
    return g


def test_alignment_recovers_depth_from_any_affine_disparity() -> None:
    gt = _gt()
    pred = 7.0 / gt.clamp(min=1e-3) - 0.2
    pred[gt == 0] = 123.0  # ignored
    out = align_disparity(pred, gt)
    assert torch.allclose(out[gt > 0], gt[gt > 0], rtol=1e-5) and bool((out[gt == 0] == 0).all())
    err = depth_errors(out, gt)
    assert err["abs_rel"] < 1e-5 and err["rmse"] < 1e-4 and err["delta1"] == 1.0


def test_errors_by_hand_and_clamping() -> None:
    gt = torch.tensor([1.0, 2.0, 4.0, 8.0])
    d = torch.tensor([1.0, 3.0, 4.0, 4.0])
    e = depth_errors(d, gt)
    assert e["abs_rel"] == pytest.approx((0 + 0.5 + 0 + 0.5) / 4)
    assert e["rmse"] == pytest.approx(math.sqrt((1 + 16) / 4))
    assert e["delta1"] == 0.5  # 3/2 and 8/4 fail the 1.25 bound
    assert depth_errors(d, torch.zeros(4)) is None
    # a constant prediction: the shift is fitted, the depth is the harmonic mean clamped to the range
    out = align_disparity(torch.ones(4), gt)
    assert torch.allclose(out, torch.full((4,), 4 / (1 + 0.5 + 0.25 + 0.125)))


def test_scorer_maps_back_through_the_letterbox() -> None:
    gt = _gt()  # a 6x8 image letterboxed into 8x8: one padded row above and below
    pred = torch.zeros(8, 8)
    pred[1:7] = 2.0 / gt.clamp(min=1e-3)
    pred[0], pred[7] = 50.0, -50.0  # padding: cut off
    scorer = DepthScorer()
    scorer.add({"ori_depth": [gt], "ratio_pad": [(1.0, (0.0, 1.0))]}, [pred], input_hw=(8, 8))
    m = scorer.result(images=1, speed={}, ms_per_image=0.0, losses={}, save_dir=None)
    assert m["images"] == 1.0 and m["abs_rel"] < 1e-5 and m["delta1"] == 1.0 and m["fitness"] == m["delta1"]


def test_ssi_loss_is_invariant_and_trains() -> None:
    depth = torch.rand(2, 12, 12, generator=torch.Generator().manual_seed(0)) * 9 + 1
    depth[0, :2] = 0.0  # no depth
    disp = 1.0 / depth.clamp(min=1e-3)
    crit = SSILoss()
    for s, t in ((1.0, 0.0), (40.0, 3.0), (0.01, -0.5)):
        loss, items = crit((s * disp + t).unsqueeze(1), {"depth": depth})
        assert float(items) < 1e-5 and loss.shape == () and items.shape == (1,)
    pred = torch.rand(2, 1, 6, 6, generator=torch.Generator().manual_seed(1), requires_grad=True)
    loss, items = crit(pred, {"depth": depth})  # upsampled to the target
    assert float(items) > 0.1 and float(loss.detach()) == pytest.approx(2 * float(items))
    loss.backward()
    assert pred.grad is not None and float(pred.grad.abs().sum()) > 0
    empty, _ = crit(pred, {"depth": torch.zeros(2, 12, 12)})
    assert float(empty.detach()) == 0.0  # no pixel with depth: nothing to learn, no NaN
