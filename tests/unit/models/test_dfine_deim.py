"""D-FINE / DEIM families: parameter counts, forward contract, FDR decoding, GO-LSD matching,
MAL, dense O2O mosaic, training steps and prediction on SAMPLE_IMAGE (CPU, tiny inputs)."""

from __future__ import annotations

import dataclasses

import pytest
import torch
from _detr_checks import (
    check_fuse_keeps_predictions,
    check_predict_sample_image_untrained,
    check_repeated_batch_training,
    detr_batch,
    empty_batch_loss,
    portable_msda,
)

from libreyolo.graphs.seam import run_eager
from libreyolo.model import Model
from libreyolo.models._detr.deim_losses import mal_loss
from libreyolo.models._detr.dfine_losses import union_matching
from libreyolo.models._detr.dfine_net import DFineDetector
from libreyolo.models._detr.dfine_variants import VARIANTS as VDFINE
from libreyolo.models._detr.fdr import (
    box_to_distance,
    distance_to_box,
    distribution_integral,
    weighting_function,
)
from libreyolo.models.deim.family import DEIM
from libreyolo.models.dfine.family import DFINE
from libreyolo.registry import parse_weights_name

FAMILIES = {"dfine": DFINE, "deim": DEIM}
VARIANTS = {"dfine": VDFINE, "deim": VDFINE}  # DEIM builds from the D-FINE size table
TINY = dataclasses.replace(VDFINE["n"].net, num_queries=20, num_denoising=12)


@pytest.fixture(autouse=True)
def _setup(monkeypatch: pytest.MonkeyPatch):
    yield from portable_msda(monkeypatch, FAMILIES.values())


_batch = detr_batch


def _tiny_model(family: str, nc: int = 3):
    model = FAMILIES[family](size="n", nc=nc)
    model.net = DFineDetector(cfg=TINY, nc=nc)
    return model


@pytest.mark.parametrize("family", sorted(FAMILIES))
@pytest.mark.parametrize("size", ["n", "s"])
def test_parameter_count_matches_published(family: str, size: str) -> None:
    v = VARIANTS[family][size]
    n = sum(p.numel() for p in FAMILIES[family].build_net(size=size, nc=80, task="detect").parameters())
    # the tables round to whole millions: within that rounding plus 3%
    assert abs(n / 1e6 - v.paper_params_m) <= 0.5 + 0.03 * v.paper_params_m, n
    if v.reference_params is not None:  # the reference code's exact count (two frozen scalars fewer here)
        assert abs(n - v.reference_params) / v.reference_params < 0.03 and n == v.reference_params - 2


def test_architecture_facts() -> None:
    n, s = (DFINE.build_net(size=k, nc=80, task="detect") for k in ("n", "s"))
    assert n.strides == (16, 32) and s.strides == (8, 16, 32)
    assert n.backbone.out_channels == (512, 1024) and s.backbone.out_channels == (256, 512, 1024)
    assert len(n.decoder.layers) == 3 and len(s.decoder.layers) == 3
    assert n.decoder.layers[0].cross_attn.num_points_list == (6, 6)
    assert s.decoder.layers[0].cross_attn.num_points_list == (3, 6, 3)
    assert s.decoder.dec_bbox_head[0].layers[-1].out_features == 4 * 33
    assert isinstance(s.decoder.layers[0].cross_attn.value_proj, torch.nn.Identity)


def test_weighting_function_and_fdr_decoding_on_hand_made_distribution() -> None:
    w = weighting_function(32, 0.5, 4.0)
    assert w.shape == (33,) and w[16] == 0 and w[0] == -4.0 and w[-1] == 4.0
    assert torch.all(w[1:] > w[:-1]) and torch.allclose(w, -w.flip(0))
    # all mass on the middle bin -> zero offsets -> the reference box itself
    logits = torch.full((1, 1, 4, 33), -1e4)
    logits[..., 16] = 0.0
    ref = torch.tensor([[[0.5, 0.4, 0.2, 0.1]]])
    dist = distribution_integral(logits.reshape(1, 1, -1), w)
    assert torch.allclose(dist, torch.zeros(1, 1, 4), atol=1e-6)
    assert torch.allclose(distance_to_box(ref, dist, 4.0), ref, atol=1e-6)
    logits2 = torch.full((4, 33), -1e4)
    logits2[:, 16] = 0.0
    logits2[2, 16] = -1e4
    logits2[2, 17] = 0.0  # right edge fully on bin 17 -> offset w[17]
    d = distribution_integral(logits2.reshape(1, 1, -1), w)[0, 0]
    assert torch.allclose(d, torch.tensor([0.0, 0.0, float(w[17]), 0.0]), atol=1e-6)
    box = distance_to_box(ref, d.view(1, 1, 4), 4.0)[0, 0]
    # x2 moves right by w[17] * w_ref / reg_scale, x1 stays: cx shifts by half of it, w grows by it
    shift = float(w[17]) * 0.2 / 4.0
    assert torch.allclose(box, torch.tensor([0.5 + shift / 2, 0.4, 0.2 + shift, 0.1]), atol=1e-6)
    # inverse: the right edge's target sits on bin 17 (left bin + right weight = 17), the others on 16
    x1y1x2y2 = torch.stack([box[0] - box[2] / 2, box[1] - box[3] / 2, box[0] + box[2] / 2, box[1] + box[3] / 2])
    idx, wr, wl = box_to_distance(ref[0], x1y1x2y2[None], reg_max=32, up=0.5, reg_scale=4.0)
    pos = idx + wr
    assert pos.tolist() == pytest.approx([16.0, 16.0, 17.0, 16.0], abs=1e-3)
    assert torch.allclose(wr + wl, torch.ones(4))


def test_union_matching_picks_most_frequent_target() -> None:
    t = torch.tensor
    m1 = [(t([0, 3]), t([1, 0]))]
    m2 = [(t([0, 5]), t([1, 0]))]
    m3 = [(t([0, 3]), t([2, 0]))]
    (rows, cols), = union_matching([m1, m2, m3])
    assert rows.tolist() == [0, 3, 5] and cols.tolist() == [1, 0, 0]


def test_mal_targets_and_weights() -> None:
    logits = torch.zeros(1, 2, 2, requires_grad=True)
    onehot = torch.tensor([[[1.0, 0.0], [0.0, 0.0]]])
    iou = torch.tensor([[[0.25, 0.0], [0.0, 0.0]]])
    loss = mal_loss(logits, onehot, iou, gamma=1.5)
    # positive: BCE(0, 0.25^1.5) weight 1; negatives: BCE(0, 0) weight 0.5^1.5 each
    bce = torch.nn.functional.binary_cross_entropy_with_logits
    expect = bce(torch.zeros(1), torch.tensor([0.125])) + 3 * 0.5**1.5 * bce(torch.zeros(1), torch.zeros(1))
    assert loss.item() == pytest.approx(expect.item(), rel=1e-5)


@pytest.mark.parametrize("family", sorted(FAMILIES))
def test_forward_shapes_train_and_eval(family: str) -> None:
    torch.manual_seed(0)
    model = _tiny_model(family)
    net = model.net.eval()
    x = torch.rand(2, 3, 64, 96)
    with torch.no_grad():
        logits, boxes = net(x)
        staged = run_eager(model.forward_stages(), x)
    q = min(20, 4 * 6 + 2 * 3)
    assert logits.shape == (2, q, 3) and boxes.shape == (2, q, 4)
    assert torch.equal(staged[0], logits) and torch.equal(staged[1], boxes)
    assert (boxes[..., 2] >= boxes[..., 0]).all() and (boxes[..., 3] >= boxes[..., 1]).all()
    net.train()
    maps = net(x)
    assert [tuple(m.shape) for m in maps] == [(2, 128, 4, 6), (2, 128, 2, 3)]
    trunk = model.train_stages()[0].fn
    assert sum(p.numel() for p in trunk.parameters()) < sum(p.numel() for p in net.parameters())


@pytest.mark.parametrize("family", sorted(FAMILIES))
def test_repeated_batch_training_reduces_loss(family: str) -> None:
    torch.manual_seed(0)
    model = _tiny_model(family)
    check_repeated_batch_training(model, steps=25, lr=1e-3, n_items=len(model.LOSS_NAMES))


@pytest.mark.parametrize("family", sorted(FAMILIES))
def test_batch_without_boxes_trains(family: str) -> None:
    torch.manual_seed(0)
    net, loss, items, _ = empty_batch_loss(_tiny_model(family))
    assert loss.item() > 0
    grads = [p.grad for p in net.decoder.dec_score_head.parameters()]
    assert all(g is not None and torch.isfinite(g).all() for g in grads)
    assert items[1:4].abs().sum() == 0  # no L1, GIoU or FGL term without boxes; cls (and DDF) still train
    assert items[0] > 0


def test_predict_sample_image_untrained() -> None:
    torch.manual_seed(0)
    for fam in (DFINE, DEIM):
        check_predict_sample_image_untrained(Model(fam(size="n", nc=80)))


def test_weights_names_and_train_defaults() -> None:
    assert (parse_weights_name("LibreDFINEs.pt").family, parse_weights_name("LibreDFINEs.pt").size) == ("dfine", "s")
    assert (parse_weights_name("LibreDEIMn.pt").family, parse_weights_name("LibreDEIMn.pt").size) == ("deim", "n")
    for fam in (DFINE, DEIM):
        assert fam.TRAIN_DEFAULTS["amp"] is False


def test_fuse_keeps_predictions() -> None:
    torch.manual_seed(0)
    check_fuse_keeps_predictions(_tiny_model("dfine"), lambda net: (
        net.backbone, net.encoder.fpn_blocks, net.encoder.pan_blocks, net.encoder.downsample_convs,
        net.encoder.lateral_convs))
