"""Shared DETR layers: assignment solver, matcher, denoising groups, GIoU, attention masks,
backbone / encoder shapes, and the decoder's use of the ``ms_deform_attn`` kernel slot (CPU)."""

from __future__ import annotations

import itertools

import numpy as np
import pytest
import torch
from _detr_checks import portable_msda

from libreyolo.kernels import registry
from libreyolo.kernels.attention import MS_DEFORM_ATTN
from libreyolo.layers.msda import ms_deform_attn_portable
from libreyolo.models._detr.common import PosAttention, sincos_2d
from libreyolo.models._detr.decoder import DETRDecoder
from libreyolo.models._detr.denoising import build_denoising_group
from libreyolo.models._detr.hungarian import HungarianMatcher, linear_sum_assignment
from libreyolo.models._detr.hybrid_encoder import HybridEncoder
from libreyolo.models._detr.losses import DETRCriterion
from libreyolo.models._detr.resnet_vd import ResNetVd
from libreyolo.ops.boxes import bbox_giou, generalized_box_iou, xywh_to_xyxy


@pytest.fixture(autouse=True)
def _portable_one_thread(monkeypatch: pytest.MonkeyPatch):
    # portable kernels (the Triton interpreter is exercised by the kernel tests, and slow here);
    # tiny ops: one thread is fastest and immune to CPU oversubscription
    yield from portable_msda(monkeypatch)


def _brute_force(cost: np.ndarray) -> float:
    n, m = cost.shape
    if n <= m:
        return min(sum(cost[i, p[i]] for i in range(n)) for p in itertools.permutations(range(m), n))
    return _brute_force(cost.T)


@pytest.mark.parametrize("shape", [(1, 1), (3, 3), (3, 5), (5, 3), (4, 6), (6, 6)])
def test_linear_sum_assignment_is_optimal(shape: tuple[int, int]) -> None:
    rng = np.random.default_rng(sum(shape))
    for _ in range(5):
        cost = rng.normal(size=shape) * 10
        rows, cols = linear_sum_assignment(cost)
        assert len(rows) == len(cols) == min(shape)
        assert len(set(rows.tolist())) == len(rows) and len(set(cols.tolist())) == len(cols)
        assert np.all(np.diff(rows) > 0)
        assert cost[rows, cols].sum() == pytest.approx(_brute_force(cost), abs=1e-9)


def test_linear_sum_assignment_empty_and_nan() -> None:
    r, c = linear_sum_assignment(np.zeros((0, 4)))
    assert r.size == 0 and c.size == 0
    with pytest.raises(Exception, match="NaN"):
        linear_sum_assignment(np.array([[np.nan, 1.0]]))


def test_matcher_matches_perfect_predictions() -> None:
    nc, q = 4, 6
    gt_boxes = torch.tensor([[0.3, 0.3, 0.2, 0.2], [0.7, 0.6, 0.3, 0.4]])
    gt_labels = torch.tensor([2, 0])
    logits = torch.full((1, q, nc), -6.0)
    boxes = torch.rand(1, q, 4) * 0.2 + 0.05
    # query 4 predicts GT 0 exactly, query 1 predicts GT 1 exactly
    boxes[0, 4], logits[0, 4, 2] = gt_boxes[0], 6.0
    boxes[0, 1], logits[0, 1, 0] = gt_boxes[1], 6.0
    (pred, gt), = HungarianMatcher()(logits, boxes, [gt_labels], [gt_boxes])
    assert dict(zip(pred.tolist(), gt.tolist(), strict=True)) == {1: 1, 4: 0}


def test_matcher_image_without_boxes() -> None:
    out = HungarianMatcher()(torch.zeros(2, 5, 3), torch.rand(2, 5, 4),
                             [torch.zeros(0, dtype=torch.long), torch.tensor([1])],
                             [torch.zeros(0, 4), torch.tensor([[0.5, 0.5, 0.2, 0.2]])])
    assert out[0][0].numel() == 0 and out[1][0].numel() == 1


def test_giou_values() -> None:
    a = torch.tensor([[0.0, 0.0, 2.0, 2.0]])
    b = torch.tensor([[0.0, 0.0, 2.0, 2.0], [4.0, 0.0, 6.0, 2.0], [1.0, 0.0, 3.0, 2.0]])
    g = generalized_box_iou(a, b)[0]
    assert g[0].item() == pytest.approx(1.0, abs=1e-6)
    assert g[1].item() == pytest.approx(0.0 - (12 - 8) / 12, abs=1e-6)  # disjoint: negative
    assert g[2].item() == pytest.approx(2 / 6, abs=1e-6)
    iou, giou = bbox_giou(a.expand(3, 4), b)
    assert torch.allclose(giou, g) and iou[2].item() == pytest.approx(2 / 6, abs=1e-6)


def test_denoising_group_layout_and_noise_bounds() -> None:
    torch.manual_seed(0)
    embed = torch.nn.Embedding(5 + 1, 8, padding_idx=5)
    labels = [torch.tensor([1, 2, 3]), torch.zeros(0, dtype=torch.long)]
    boxes = [torch.tensor([[0.5, 0.5, 0.2, 0.2], [0.3, 0.4, 0.1, 0.3], [0.6, 0.7, 0.3, 0.2]]), torch.zeros(0, 4)]
    g = build_denoising_group(labels, boxes, nc=5, num_queries=7, class_embed=embed, num_denoising=12,
                              label_noise=0.0, box_noise=1.0)
    assert g is not None and g.groups == 4 and g.max_gt == 3 and g.num_queries == 24
    assert g.query.shape == (2, 24, 8) and g.ref_unact.shape == (2, 24, 4)
    assert g.positive_idx[0].tolist() == [0, 1, 2, 6, 7, 8, 12, 13, 14, 18, 19, 20]
    assert g.gt_idx[0].tolist() == [0, 1, 2] * 4 and g.positive_idx[1].numel() == 0
    # positives stay within half a box size of their GT corners (box_noise = 1)
    noised = xywh_to_xyxy(g.ref_unact[0, g.positive_idx[0]].sigmoid())
    gt = xywh_to_xyxy(boxes[0][g.gt_idx[0]])
    half = boxes[0][g.gt_idx[0]][:, 2:].repeat(1, 2) * 0.5
    assert torch.all((noised - gt).abs() <= half + 1e-4)
    m = g.attn_mask
    assert m.shape == (31, 31)
    assert m[24:, :24].all() and not m[24:, 24:].any()  # matching queries never see denoising ones
    assert not m[0:6, 0:6].any() and m[0:6, 6:24].all() and m[6:12, 0:6].all()  # groups are isolated
    assert not m[:24, 24:].any()  # denoising queries see the matching queries


def test_denoising_without_boxes_and_with_huge_box_counts() -> None:
    embed = torch.nn.Embedding(4, 8, padding_idx=3)
    none = build_denoising_group([torch.zeros(0, dtype=torch.long)] * 2, [torch.zeros(0, 4)] * 2, nc=3,
                                 num_queries=10, class_embed=embed, num_denoising=100)
    assert none is None
    n = 500
    big = build_denoising_group([torch.zeros(n, dtype=torch.long)], [torch.rand(n, 4) * 0.5 + 0.25], nc=3,
                                num_queries=10, class_embed=embed, num_denoising=100)
    assert big is not None and big.num_queries <= 200 and big.groups == 1
    assert big.gt_idx[0].max().item() < 100


def test_pos_attention_mask_blocks_information() -> None:
    torch.manual_seed(0)
    att = PosAttention(16, num_heads=2).eval()
    x = torch.rand(1, 4, 16)
    mask = torch.zeros(4, 4, dtype=torch.bool)
    mask[:, 3] = True  # nobody may attend to token 3 ...
    mask[3, 3] = False  # ... except itself
    y1 = att(x, attn_mask=mask)
    x2 = x.clone()
    x2[0, 3] += 1.0
    y2 = att(x2, attn_mask=mask)
    assert torch.equal(y1[0, :3], y2[0, :3])
    assert not torch.equal(y1[0, 3], y2[0, 3])


def test_backbone_and_encoder_shapes() -> None:
    x = torch.rand(1, 3, 64, 96)
    for depth, chans in ((18, (128, 256, 512)), (50, (512, 1024, 2048))):
        net = ResNetVd(depth=depth, width=64 if depth == 18 else 16)
        feats = net(x)
        want = chans if depth == 18 else tuple(c // 4 for c in chans)
        assert net.out_channels == want and net.out_strides == (8, 16, 32)
        assert [tuple(f.shape) for f in feats] == [(1, c, 64 // s, 96 // s) for c, s in zip(want, (8, 16, 32), strict=True)]
    enc = HybridEncoder(in_channels=(16, 32, 64), hidden=32, num_heads=4, ffn=64, expansion=0.5)
    outs = enc([torch.rand(2, 16, 8, 12), torch.rand(2, 32, 4, 6), torch.rand(2, 64, 2, 3)])
    assert [tuple(o.shape) for o in outs] == [(2, 32, 8, 12), (2, 32, 4, 6), (2, 32, 2, 3)]
    assert sincos_2d(2, 3, 8).shape == (1, 6, 8)


def test_decoder_consults_ms_deform_attn_slot(monkeypatch: pytest.MonkeyPatch) -> None:
    calls = []

    def spy(value, spatial_shapes, level_start_index, loc, weights):
        calls.append(tuple(loc.shape))
        return ms_deform_attn_portable(value, [tuple(s) for s in spatial_shapes.tolist()], loc, weights)

    torch.manual_seed(0)
    dec = DETRDecoder(nc=3, hidden=32, num_queries=10, feat_channels=(32, 32, 32), num_heads=4, num_layers=2,
                      ffn=64).eval()
    feats = [torch.rand(2, 32, 4, 4), torch.rand(2, 32, 2, 2), torch.rand(2, 32, 1, 1)]
    with torch.no_grad():
        ref_logits, ref_boxes = dec(feats)  # kernels off: the portable path
    monkeypatch.delenv("LIBREYOLO_KERNELS")
    monkeypatch.setenv("TRITON_INTERPRET", "0")  # the in-tree Triton provider declines on CPU
    registry.clear_cache()
    registry.register(MS_DEFORM_ATTN, spy, name="detr-test-spy", predicate=lambda *a, **k: True)
    try:
        with torch.no_grad():
            logits, boxes = dec(feats)
    finally:
        registry.unregister(MS_DEFORM_ATTN, "detr-test-spy")
    assert len(calls) == 2 and calls[0] == (2, 10, 4, 3, 4, 2)
    assert torch.equal(logits, ref_logits) and torch.equal(boxes, ref_boxes)
    assert logits.shape == (2, 10, 3) and boxes.shape == (2, 10, 4)


def test_criterion_without_boxes_scores_background_only() -> None:
    torch.manual_seed(0)
    dec = DETRDecoder(nc=3, hidden=32, num_queries=8, feat_channels=(32, 32, 32), num_heads=4, num_layers=2,
                      ffn=64, num_denoising=6).train()
    feats = [torch.rand(2, 32, 4, 4), torch.rand(2, 32, 2, 2), torch.rand(2, 32, 1, 1)]
    labels, boxes = [torch.zeros(0, dtype=torch.long)] * 2, [torch.zeros(0, 4)] * 2
    out = dec(feats, dec.make_denoising(labels, boxes, num_queries=8))
    assert out.dn is None and out.logits.shape == (2, 2, 8, 3)
    total, items = DETRCriterion(nc=3)(out, labels, boxes)
    assert torch.isfinite(total) and items[0] > 0 and items[1] == 0 and items[2] == 0
    total.backward()
    assert dec.dec_score_head[0].weight.grad is not None and dec.dec_score_head[0].weight.grad.abs().sum() > 0


def test_linear_sum_assignment_at_detr_size_is_optimal_against_an_independent_check() -> None:
    # 300 queries x 40 ground truths: the optimal cost is unique with probability 1 for random
    # costs, and a primal-dual bound checks it without trusting any solver: with the solver's
    # assignment, no single swap of two assigned rows, nor moving one to a free row, lowers it.
    rng = np.random.default_rng(7)
    cost = rng.random((40, 300))
    rows, cols = linear_sum_assignment(cost)
    assert rows.dtype == cols.dtype == np.int64 and len(rows) == 40 and np.all(np.diff(rows) > 0)
    total = cost[rows, cols].sum()
    free = np.setdiff1d(np.arange(300), cols)
    for a in range(40):
        assert cost[rows[a], free].min() >= cost[rows[a], cols[a]] - 1e-12
        for b in range(a + 1, 40):
            swapped = total - cost[rows[a], cols[a]] - cost[rows[b], cols[b]] + cost[rows[a], cols[b]] + cost[rows[b], cols[a]]
            assert swapped >= total - 1e-12
