"""Matte metrics (IoU, MAE, F-measure, S-measure) on hand-made cases, the scorer through a letterbox,
the loss, and BiRefNet's fused-attention flag (SPEC K-9: present, off by default)."""

from __future__ import annotations

import numpy as np
import pytest
import torch

from libreyolo.kernels.attention import fused_attention_modules, set_fused_attention
from libreyolo.models._base.matte import MatteLoss
from libreyolo.models.birefnet.family import BiRefNet
from libreyolo.tasks.matte.metrics import matte_errors, s_measure
from libreyolo.tasks.matte.scoring import MatteScorer


def test_metrics_on_simple_cases() -> None:
    gt = torch.zeros(10, 10)
    gt[:5] = 1.0
    half = gt.clone()
    half[:, 5:] = 0.0  # half of the object found, nothing wrong outside it
    e = matte_errors(half, gt)
    assert e["iou"] == pytest.approx(0.5) and e["mae"] == pytest.approx(0.25)
    assert e["fmeasure"] == pytest.approx(1.3 * 0.5 / (0.3 + 0.5))  # precision 1, recall 0.5
    assert 0.0 < e["smeasure"] < 1.0
    empty = torch.zeros(10, 10)
    assert matte_errors(empty, empty) == {"mae": 0.0, "iou": 1.0, "fmeasure": 1.0, "smeasure": 1.0}
    assert matte_errors(torch.ones(10, 10), empty)["smeasure"] == pytest.approx(0.0)
    assert s_measure(np.full((4, 4), 0.25), np.ones((4, 4), bool)) == pytest.approx(0.25)
    inverted = matte_errors(1.0 - gt, gt)
    assert inverted["iou"] == 0.0 and inverted["fmeasure"] == 0.0 and inverted["smeasure"] < 0.1


def test_scorer_maps_back_through_the_letterbox() -> None:
    gt = torch.zeros(4, 8)
    gt[:, :4] = 1.0
    pred = torch.zeros(8, 8)  # the 4x8 image letterboxed into 8x8: 2 padded rows above and below
    pred[2:6, :4] = 1.0
    pred[:2] = 1.0  # junk in the padding is cut away
    sc = MatteScorer()
    sc.add({"ori_alpha": [gt], "ratio_pad": [(1.0, (0.0, 2.0))]}, [pred], input_hw=(8, 8))
    m = sc.result(images=1, speed={}, ms_per_image=0.0, losses={}, save_dir=None)
    assert m["iou"] == pytest.approx(1.0) and m["mae"] == pytest.approx(0.0) and m["fitness"] == m["iou"]


def test_loss_prefers_the_right_matte_and_reads_all_output_forms() -> None:
    alpha = torch.zeros(2, 16, 16)
    alpha[:, 4:12, 4:12] = 1.0
    good = (alpha * 20 - 10).unsqueeze(1)
    loss = MatteLoss()
    l_good, items = loss(good, {"alpha": alpha})
    l_bad, _ = loss(-good, {"alpha": alpha})
    assert float(l_good) < float(l_bad) and items.shape == (3,) and float(items[2]) == 0.0
    small = torch.nn.functional.interpolate(good, size=(8, 8), mode="bilinear", align_corners=True)
    l_list, _ = loss([small, good], {"alpha": alpha})  # auxiliary maps are resized to the target
    assert float(l_list) > float(l_good)


def test_fused_attention_flag_is_off_by_default_and_flips() -> None:
    torch.manual_seed(0)
    model = BiRefNet(size="tiny")
    mods = fused_attention_modules(model.net)
    assert len(mods) == 8 and not any(m.fused_attn for m in mods) and model.arch == {}
    x = torch.rand(1, 3, 64, 64, generator=torch.Generator().manual_seed(1))
    with torch.no_grad():
        ref = model.net(x)
        assert set_fused_attention(model.net) == 8
        try:
            assert model.arch == {"fused_attn": True} and model.cuda_graph_refusal() is not None
            assert torch.allclose(model.net(x), ref, rtol=1e-4, atol=1e-5)
        finally:
            model.set_arch(fused_attn=None)
    assert model.arch == {}
