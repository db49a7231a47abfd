"""RTMDet: network contract, parameter counts, fusing, postprocessing, the dynamic soft label
assigner, the loss, training steps, registry names and prediction (CPU, tiny inputs)."""

from __future__ import annotations

import csv
import math
from collections.abc import Iterator
from types import SimpleNamespace

import pytest
import torch
import torch.nn.functional as F
from torch import Tensor, nn

from libreyolo.errors import ConfigError
from libreyolo.graphs.parity import randomise_norm_stats
from libreyolo.model import Model
from libreyolo.models.rtmdet.cspnext import ChannelAttention, CSPNeXtBlock, CSPNeXtLayer
from libreyolo.models.rtmdet.family import RTMDet
from libreyolo.models.rtmdet.loss import (
    DynamicSoftLabelAssigner,
    RTMDetLoss,
    build_targets,
    giou_loss,
    pairwise_iou,
    quality_focal_loss,
)
from libreyolo.models.rtmdet.nn import SharedConvSepBN, build_rtmdet
from libreyolo.models.rtmdet.postprocess import decode_boxes, grid_points, postprocess
from libreyolo.models.rtmdet.variants import VARIANTS
from libreyolo.ops.anchors import flatten_levels
from libreyolo.registry import parse_weights_name, register_family

STRIDES = (8, 16, 32)


@pytest.fixture(autouse=True)
def _one_thread() -> Iterator[None]:
    """Small convs are slower with several threads on a shared CPU; restore afterwards."""
    n = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(n)


def _register() -> None:
    # registering the same class again is a no-op, so this is safe whether or not
    # libreyolo/models/__init__.py registers the family already.
    register_family(RTMDet)


def _n_params(net: nn.Module) -> int:
    return sum(p.numel() for p in net.parameters())


# --------------------------------------------------------------------------- network


@pytest.mark.parametrize("size", ["t", "s", "m", "l", "x"])
def test_param_count_matches_published_table(size: str) -> None:
    net = build_rtmdet(size=size, nc=80)
    n = _n_params(net) / 1e6
    assert abs(n / VARIANTS[size].paper_params_m - 1) < 0.03, f"{size}: {n:.3f}M"


@pytest.mark.parametrize("size", ["t", "s"])
def test_forward_shapes_train_and_eval(size: str) -> None:
    net = build_rtmdet(size=size, nc=5)
    x = torch.rand(2, 3, 64, 96)
    for mode in (True, False):
        net.train(mode)
        out = net(x)
        assert [tuple(o.shape) for o in out] == [(2, 9, 64 // s, 96 // s) for s in STRIDES]


def test_head_shares_convs_across_levels_with_separate_bn() -> None:
    net = build_rtmdet(size="t", nc=80)
    head = net.head
    # two stacked shared convs per branch, three BatchNorms each; unshared 1x1 predictors
    assert len(head.cls_convs) == 2 and all(len(m.bns) == 3 for m in head.cls_convs)
    assert len({id(c) for c in head.rtm_cls}) == 3
    # the class bias starts at the 0.01 prior
    assert torch.allclose(head.rtm_cls[0].bias.sigmoid(), torch.full((80,), 0.01), atol=1e-6)
    # a shared conv's weight gets gradients from every level
    net.train()
    out = net(torch.rand(1, 3, 64, 64))
    out[2][:, 4:].sum().backward()  # stride-32 level only
    assert head.cls_convs[0].conv.weight.grad.abs().sum() > 0
    assert head.cls_convs[0].bns[0].weight.grad is None or head.cls_convs[0].bns[0].weight.grad.abs().sum() == 0
    assert head.cls_convs[0].bns[2].weight.grad.abs().sum() > 0


def test_cspnext_blocks_use_large_kernel_depthwise_and_attention_in_backbone_only() -> None:
    net = build_rtmdet(size="t", nc=80)
    dw = [m for m in net.backbone.modules() if isinstance(m, nn.Conv2d) and m.groups > 1]
    assert dw and all(m.kernel_size == (5, 5) and m.groups == m.in_channels for m in dw)
    layers = [m for m in net.backbone.modules() if isinstance(m, CSPNeXtLayer)]
    assert len(layers) == 4 and all(isinstance(m.attention, ChannelAttention) for m in layers)
    assert not any(isinstance(m, ChannelAttention) for m in net.neck.modules())


def test_channel_attention_gates_each_channel() -> None:
    att = ChannelAttention(4)
    with torch.no_grad():
        att.fc.weight.zero_()
        att.fc.bias.copy_(torch.tensor([-10.0, 0.0, 1.5, 10.0]))  # hardsigmoid: 0, 0.5, 0.75, 1
    x = torch.rand(2, 4, 5, 5) + 0.1
    gate = torch.tensor([0.0, 0.5, 0.75, 1.0]).view(1, 4, 1, 1)
    torch.testing.assert_close(att(x), x * gate)


def test_cspnext_block_shortcut_only_when_widths_match() -> None:
    same, wider = CSPNeXtBlock(8, 8), CSPNeXtBlock(8, 16)
    assert same.use_add and not wider.use_add and not CSPNeXtBlock(8, 8, shortcut=False).use_add
    same.eval()
    with torch.no_grad():
        for m in same.modules():
            if isinstance(m, nn.BatchNorm2d):  # zero the block's output: only the identity is left
                m.weight.zero_()
                m.bias.fill_(-30.0)
    x = torch.rand(1, 8, 6, 6)
    torch.testing.assert_close(same(x), x, atol=1e-6, rtol=0)


@pytest.mark.parametrize("size", ["t", "m"])  # m: exp_on_reg does not matter to fusing, width does
def test_fuse_keeps_eval_outputs(size: str) -> None:
    torch.manual_seed(0)
    net = build_rtmdet(size=size, nc=3).eval()
    randomise_norm_stats(net, seed=0)
    x = torch.rand(1, 3, 64, 64)
    with torch.no_grad():
        ref = net(x)
        net.fuse()
        out = net(x)
    assert not any(isinstance(m, nn.BatchNorm2d) for m in net.modules())
    assert all(m.fused is not None for m in net.modules() if isinstance(m, SharedConvSepBN))
    for a, b in zip(ref, out, strict=True):
        torch.testing.assert_close(b, a, rtol=1e-4, atol=1e-4)


def test_bad_size_and_nc_raise() -> None:
    with pytest.raises(ConfigError, match="sizes"):
        build_rtmdet(size="q", nc=80)
    with pytest.raises(ConfigError, match="nc"):
        build_rtmdet(size="t", nc=0)


# --------------------------------------------------------------------------- registry / predict


def test_weights_names_resolve() -> None:
    _register()
    for s in ("t", "s", "m", "l", "x"):
        p = parse_weights_name(f"LibreRTMDet{s}.pt")
        assert (p.family, p.size, p.task) == ("rtmdet", s, "detect")


def test_predict_on_sample_image() -> None:
    _register()
    from libreyolo import SAMPLE_IMAGE, LibreYOLO

    model = LibreYOLO("LibreRTMDett.pt", pretrained=False, nc=3)
    assert isinstance(model.family, RTMDet) and model.nc == 3
    res = model.predict(SAMPLE_IMAGE, conf=0.0, max_det=7, imgsz=128, device="cpu")
    assert len(res) == 1
    boxes = res[0].boxes
    assert len(boxes) == 7  # untrained scores are ~0.01, all above conf=0
    h, w = res[0].orig_shape
    xyxy = torch.as_tensor(boxes.xyxy)
    assert (xyxy[:, 0] >= 0).all() and (xyxy[:, 2] <= w).all() and (xyxy[:, 3] <= h).all()
    conf = torch.as_tensor(boxes.conf)
    assert ((conf > 0.001) & (conf < 0.1)).all()  # the head's 0.01 prior
    assert set(torch.as_tensor(boxes.cls).tolist()) <= {0.0, 1.0, 2.0}


def test_onnx_export_holds_the_raw_outputs(tmp_path) -> None:  # noqa: ANN001 - pytest fixture
    pytest.importorskip("onnx")
    ort = pytest.importorskip("onnxruntime")
    from libreyolo.export.onnx import portable_op_violations

    _register()
    import onnx

    torch.manual_seed(0)
    model = Model(RTMDet(size="t", nc=3))
    path = model.export(format="onnx", imgsz=64, dynamic=True, file=str(tmp_path / "m.onnx"))
    assert portable_op_violations(onnx.load(str(path))) == []
    sess = ort.InferenceSession(str(path))
    x = torch.rand(2, 3, 96, 64)
    outs = sess.run(None, {sess.get_inputs()[0].name: x.numpy()})
    assert [o.shape for o in outs] == [(2, 7, 96 // s, 64 // s) for s in STRIDES]
    with torch.no_grad():
        ref = model.net.eval()(x)
    for o, r in zip(outs, ref, strict=True):
        torch.testing.assert_close(torch.from_numpy(o), r, rtol=1e-4, atol=1e-4)


# --------------------------------------------------------------------------- postprocess


def _raw(nc: int, hw: tuple[int, int] = (64, 64)) -> list[Tensor]:
    """Raw outputs where every point is confident background (class logits -20)."""
    out = []
    for s in STRIDES:
        r = torch.zeros(1, 4 + nc, hw[0] // s, hw[1] // s)
        r[:, 4:] = -20.0
        out.append(r)
    return out


def test_grid_points_are_cell_corners() -> None:
    pts, st = grid_points([(2, 3), (1, 1)], (8, 16))
    assert pts.tolist() == [[0, 0], [8, 0], [16, 0], [0, 8], [8, 8], [16, 8], [0, 0]]
    assert st.tolist() == [8, 8, 8, 8, 8, 8, 16]


def test_postprocess_decodes_and_suppresses() -> None:
    net = SimpleNamespace(nc=2, strides=STRIDES, exp_on_reg=False)
    raw = _raw(2)
    # level 0 (stride 8), row 2, col 3 -> point (24, 16); distances (1, 1, 2, 2) strides
    raw[0][0, :4, 2, 3] = torch.tensor([1.0, 1.0, 2.0, 2.0])
    raw[0][0, 4 + 1, 2, 3] = 2.0  # class 1, score sigmoid(2)
    # row 2, col 4 -> point (32, 16); the same box, class 1 with a lower score, and class 0
    raw[0][0, :4, 2, 4] = torch.tensor([2.0, 1.0, 1.0, 2.0])
    raw[0][0, 4 + 1, 2, 4] = 1.0
    raw[0][0, 4 + 0, 2, 4] = 0.0
    # level 2 (stride 32), point (32, 32): a different box of class 0
    raw[2][0, :4, 1, 1] = torch.tensor([0.5, 0.5, 0.25, 0.25])
    raw[2][0, 4 + 0, 1, 1] = 3.0
    dets = postprocess(raw, net=net, conf=0.3, iou=0.5, classes=None, max_det=100, agnostic=False)[0]
    box = [16.0, 8.0, 40.0, 32.0]
    expect = torch.tensor([
        [16.0, 16.0, 40.0, 40.0, torch.tensor(3.0).sigmoid().item(), 0.0],
        [*box, torch.tensor(2.0).sigmoid().item(), 1.0],
        [*box, 0.5, 0.0],
    ])
    torch.testing.assert_close(dets, expect)
    agn = postprocess(raw, net=net, conf=0.3, iou=0.5, classes=None, max_det=100, agnostic=True)[0]
    assert agn.shape[0] == 2 and agn[:, 5].tolist() == [0.0, 1.0]
    only1 = postprocess(raw, net=net, conf=0.3, iou=0.5, classes=[1], max_det=100, agnostic=False)[0]
    assert only1.shape[0] == 1 and only1[0, 5] == 1.0
    top1 = postprocess(raw, net=net, conf=0.3, iou=0.5, classes=None, max_det=1, agnostic=False)[0]
    assert top1.shape[0] == 1 and top1[0, 4] == expect[0, 4]
    # exp_on_reg sizes decode exp(raw) * stride
    net_exp = SimpleNamespace(nc=2, strides=STRIDES, exp_on_reg=True)
    raw2 = _raw(2)
    raw2[1][0, :4, 1, 2] = torch.log(torch.tensor([1.0, 0.5, 1.0, 2.0]))  # point (32, 16), stride 16
    raw2[1][0, 4, 1, 2] = 5.0
    d = postprocess(raw2, net=net_exp, conf=0.3, iou=0.5, classes=None, max_det=10, agnostic=False)[0]
    torch.testing.assert_close(d[:, :4], torch.tensor([[16.0, 8.0, 48.0, 48.0]]))


def test_postprocess_rejects_wrong_channel_count() -> None:
    net = SimpleNamespace(nc=3, strides=STRIDES, exp_on_reg=False)
    with pytest.raises(ConfigError, match="classes"):
        postprocess(_raw(2), net=net, conf=0.3, iou=0.5, classes=None, max_det=10, agnostic=False)
    with pytest.raises(ConfigError, match="levels"):
        postprocess(_raw(3)[:2], net=net, conf=0.3, iou=0.5, classes=None, max_det=10, agnostic=False)


# --------------------------------------------------------------------------- assigner


def _assign(logits: Tensor, pred: Tensor, points: Tensor, strides: Tensor, labels: list[list[int]],
            boxes: list[list[list[float]]]):  # noqa: ANN202 - test helper
    """Pad per-image GT lists and run the batched assigner."""
    b = len(labels)
    m = max((len(x) for x in labels), default=0)
    gl = torch.zeros(b, m, dtype=torch.long)
    gb = torch.zeros(b, m, 4)
    mask = torch.zeros(b, m, dtype=torch.bool)
    for i, (lab, box) in enumerate(zip(labels, boxes, strict=True)):
        if lab:
            gl[i, :len(lab)] = torch.tensor(lab)
            gb[i, :len(lab)] = torch.tensor(box)
            mask[i, :len(lab)] = True
    return DynamicSoftLabelAssigner(topk=13)(logits, pred, points, strides, gl, gb, mask)


def _one_level_4x4() -> tuple[Tensor, Tensor]:
    return grid_points([(4, 4)], (8,))  # points at 0, 8, 16, 24 on each axis


def _pid(x: int, y: int) -> int:
    return (y // 8) * 4 + x // 8


def test_assigner_takes_dynamic_k_best_points_inside_the_box() -> None:
    pts, st = _one_level_4x4()
    a = pts.shape[0]
    gt = [4.0, 4.0, 20.0, 20.0]  # points (8, 8), (16, 8), (8, 16), (16, 16) lie inside
    pred = torch.cat((pts - 1.0, pts + 1.0), -1)[None].repeat(2, 1, 1)  # 2x2 px boxes: IoU ~0.016
    pred[0, _pid(8, 8)] = torch.tensor(gt)  # two exact predictions: top-13 IoU sum = 2.0x -> k = 2
    pred[0, _pid(16, 16)] = torch.tensor(gt)
    pred[0, _pid(0, 0)] = torch.tensor(gt)  # exact but outside the box: never a candidate
    logits = torch.zeros(2, a, 3)
    t = _assign(logits, pred, pts, st, [[2], []], [[gt], []])
    fg = t.fg_mask[0].nonzero().squeeze(1).tolist()
    assert fg == sorted([_pid(8, 8), _pid(16, 16)])
    assert t.labels[0, fg].tolist() == [2, 2] and torch.allclose(t.ious[0, fg], torch.ones(2))
    assert t.bboxes[0, fg].tolist() == [gt, gt]
    assert not t.fg_mask[1].any()  # an image without boxes has no positives
    assert t.ious[0, ~t.fg_mask[0]].abs().sum() == 0


def test_assigner_gives_a_contested_point_to_its_cheapest_box() -> None:
    pts, st = _one_level_4x4()
    a = pts.shape[0]
    box_b = [6.0, 6.0, 28.0, 28.0]  # padded index 0
    box_a = [4.0, 4.0, 20.0, 20.0]  # padded index 1
    pred = torch.cat((pts - 1.0, pts + 1.0), -1)[None]
    pred[0, _pid(16, 16)] = torch.tensor(box_a)  # IoU 1 with A, 256 / 484 with B
    logits = torch.zeros(1, a, 2)
    t = _assign(logits, pred, pts, st, [[1, 0]], [[box_b, box_a]])
    # both boxes have k = 1 and both want (16, 16); A (IoU cost ~0) is cheaper than B (-3 log 0.53)
    assert t.fg_mask[0].nonzero().squeeze(1).tolist() == [_pid(16, 16)]
    assert t.gt_idx[0, _pid(16, 16)] == 1 and t.labels[0, _pid(16, 16)] == 0
    assert torch.allclose(t.ious[0, _pid(16, 16)], torch.tensor(1.0))


def test_assigner_without_any_box() -> None:
    pts, st = _one_level_4x4()
    t = _assign(torch.zeros(2, 16, 3), torch.zeros(2, 16, 4), pts, st, [[], []], [[], []])
    assert t.fg_mask.shape == (2, 16) and not t.fg_mask.any() and t.ious.sum() == 0


def _reference_assign(logits: Tensor, pred: Tensor, pts: Tensor, st: Tensor, gl: Tensor,
                      gb: Tensor) -> tuple[Tensor, Tensor, Tensor, int]:
    """The recipe written plainly for one image: full (points x boxes x classes) soft label
    tensor, a loop over boxes for dynamic k."""
    a, m = pred.shape[0], gb.shape[0]
    fg = torch.zeros(a, dtype=torch.bool)
    gt_idx = torch.zeros(a, dtype=torch.long)
    ious_out = torch.zeros(a)
    if m == 0:
        return fg, gt_idx, ious_out, 0
    inside = torch.stack([((pts > b[:2]) & (pts < b[2:])).all(-1) for b in gb], 1)  # (A, M)
    valid = inside.any(1)
    if not valid.any():
        return fg, gt_idx, ious_out, 0
    vp, vs, vl, vst = pts[valid], pred[valid], logits[valid], st[valid]
    centre = (gb[:, :2] + gb[:, 2:]) / 2
    dist = (vp[:, None] - centre[None]).pow(2).sum(-1).sqrt() / vst[:, None]
    prior = torch.pow(10.0, dist - 3.0)
    ious = pairwise_iou(vs[None], gb[None])[0]
    iou_cost = -torch.log(ious + 1e-7) * 3.0
    soft = F.one_hot(gl, logits.shape[1]).float()[None] * ious[..., None]  # (V, M, C)
    x = vl[:, None, :].expand_as(soft)
    cls_cost = (F.binary_cross_entropy_with_logits(x, soft, reduction="none")
                * (soft - x.sigmoid()).abs().pow(2)).sum(-1)
    cost = cls_cost + iou_cost + prior
    match = torch.zeros_like(cost, dtype=torch.bool)
    ks = ious.topk(min(13, ious.shape[0]), dim=0).values.sum(0).int().clamp(min=1)
    for j in range(m):
        match[cost[:, j].topk(int(ks[j]), largest=False).indices, j] = True
    multi = match.sum(1) > 1
    match[multi] = F.one_hot(cost[multi].argmin(1), m).bool()
    vfg = match.any(1)
    vidx = match.to(torch.uint8).argmax(1)
    fg[valid] = vfg
    gt_idx[valid] = torch.where(vfg, vidx, 0)
    ious_out[valid] = torch.where(vfg, ious.gather(1, vidx[:, None]).squeeze(1), 0.0)
    return fg, gt_idx, ious_out, int(multi.sum())


def test_batched_assigner_equals_the_plain_recipe_on_random_cases() -> None:
    g = torch.Generator().manual_seed(0)
    pts, st = grid_points([(8, 8), (4, 4), (2, 2)], STRIDES)
    a, nc, b = pts.shape[0], 4, 4
    counts = [3, 0, 1, 5]
    m = max(counts)
    gl = torch.zeros(b, m, dtype=torch.long)
    gb = torch.zeros(b, m, 4)
    mask = torch.zeros(b, m, dtype=torch.bool)
    for i, n in enumerate(counts):
        xy = torch.rand(n, 2, generator=g) * 24  # crowded: boxes overlap, points are contested
        wh = torch.rand(n, 2, generator=g) * 30 + 10
        gb[i, :n] = torch.cat((xy, (xy + wh).clamp(max=64)), 1)
        gl[i, :n] = torch.randint(0, nc, (n,), generator=g)
        mask[i, :n] = True
    logits = torch.randn(b, a, nc, generator=g) * 2
    dist = torch.rand(b, a, 4, generator=g) * 3 * st[None, :, None]
    pred = torch.cat((pts - dist[..., :2], pts + dist[..., 2:]), -1)
    t = DynamicSoftLabelAssigner(topk=13)(logits, pred, pts, st, gl, gb, mask)
    n_fg = n_contested = 0
    for i, n in enumerate(counts):
        fg, idx, ious, contested = _reference_assign(logits[i], pred[i], pts, st, gl[i, :n], gb[i, :n])
        assert torch.equal(t.fg_mask[i], fg), f"image {i}"
        assert torch.equal(torch.where(t.fg_mask[i], t.gt_idx[i], 0), idx)
        torch.testing.assert_close(t.ious[i], ious)
        n_fg += int(fg.sum())
        n_contested += contested
    assert n_fg >= 6 and n_contested >= 1  # the case is not vacuous: it has contested points


# --------------------------------------------------------------------------- loss / training


def test_giou_loss_values() -> None:
    p = torch.tensor([[0.0, 0.0, 2.0, 2.0], [0.0, 0.0, 1.0, 1.0]])
    t = torch.tensor([[0.0, 0.0, 2.0, 2.0], [2.0, 0.0, 3.0, 1.0]])
    # identical -> 0; disjoint unit boxes 1 apart: IoU 0, enclosure 3, union 2 -> 1 + 1/3
    torch.testing.assert_close(giou_loss(p, t), torch.tensor([0.0, 1.0 + 1.0 / 3.0]))


def test_quality_focal_loss_values() -> None:
    x = torch.tensor([[0.0, 0.0, 2.0]])
    t = torch.tensor([[1.0, 0.0, 0.5]])
    s2 = 1 / (1 + math.exp(-2.0))
    want = torch.tensor([[math.log(2) * 0.25,  # positive: BCE(0, 1) * |1 - 0.5|^2
                          math.log(2) * 0.25,  # negative: BCE(0, 0) * 0.5^2
                          (math.log1p(math.exp(2.0)) - 2.0 * 0.5) * (s2 - 0.5) ** 2]])
    torch.testing.assert_close(quality_focal_loss(x, t), want)


def _batch() -> dict[str, Tensor]:
    return {
        "img": torch.rand(2, 3, 64, 64, generator=torch.Generator().manual_seed(1)),
        "batch_idx": torch.tensor([0, 0, 1]),
        "cls": torch.tensor([0, 2, 1]),
        "bboxes": torch.tensor([[0.3, 0.3, 0.3, 0.4], [0.7, 0.6, 0.4, 0.3], [0.5, 0.5, 0.6, 0.6]]),
    }


def test_loss_contract_empty_images_and_gradients() -> None:
    torch.manual_seed(0)
    model = Model(RTMDet(size="t", nc=3))
    net = model.net.train()
    crit = model.build_criterion()
    assert isinstance(crit, RTMDetLoss) and RTMDet.LOSS_NAMES == ("cls", "box")
    batch = _batch()
    loss, items = crit(net(batch["img"]), batch)
    assert loss.dim() == 0 and items.shape == (2,) and not items.requires_grad
    torch.testing.assert_close(loss.detach(), items.sum() * 2)
    loss.backward()
    assert net.head.rtm_reg[0].weight.grad.abs().sum() > 0  # the box loss reaches the regression
    net.zero_grad()
    empty = {"img": batch["img"], "batch_idx": torch.zeros(0, dtype=torch.long),
             "cls": torch.zeros(0, dtype=torch.long), "bboxes": torch.zeros(0, 4)}
    loss, items = crit(net(batch["img"]), empty)
    assert torch.isfinite(loss) and items[1] == 0 and items[0] > 0  # background-only QFL
    loss.backward()
    assert net.head.rtm_cls[0].bias.grad.abs().sum() > 0


def test_loss_values_follow_the_recipe_and_ignore_background_boxes() -> None:
    torch.manual_seed(0)
    model = Model(RTMDet(size="t", nc=3))
    net = model.net.eval()
    with torch.no_grad():
        for conv in net.head.rtm_reg:
            conv.bias.fill_(1.0)
    crit = model.build_criterion()
    batch = _batch()
    with torch.no_grad():
        preds = [p.clone() for p in net(batch["img"])]
        preds[0][1, :4, 0, 0] = 1e20  # a background point (image 1, corner) with an absurd box
    loss, items = crit(preds, batch)
    assert torch.isfinite(loss)
    flat = flatten_levels(preds).transpose(1, 2)
    pts, st = grid_points([tuple(p.shape[2:]) for p in preds], STRIDES)
    boxes = decode_boxes(flat[..., :4], pts, st, exp_on_reg=False)
    gl, gb, gm = build_targets(batch, batch_size=2, img_hw=(64, 64), device=torch.device("cpu"))
    t = crit.assigner(flat[..., 4:], boxes, pts, st, gl, gb, gm)
    fg = t.fg_mask
    assert fg.sum() >= 3 and not fg[1, 0]
    avg = t.ious.sum().clamp(min=1)
    target = torch.zeros_like(flat[..., 4:])
    target[fg, t.labels[fg]] = t.ious[fg]
    want_cls = quality_focal_loss(flat[..., 4:], target).sum() / avg
    want_box = 2.0 * (giou_loss(boxes[fg], t.bboxes[fg]) * t.ious[fg]).sum() / avg
    torch.testing.assert_close(items, torch.stack((want_cls, want_box)))


def test_train_steps_decrease_the_loss() -> None:
    torch.manual_seed(0)
    model = Model(RTMDet(size="t", nc=3))
    net = model.net.train()
    # Start from boxes of two strides instead of points: at the reference initialisation the
    # IoU-weighted normalisation makes the loss *grow* while boxes grow from zero size, which is
    # expected and says nothing about fitting. From here the loss measures the fit.
    with torch.no_grad():
        for conv in net.head.rtm_reg:
            conv.bias.fill_(1.0)
    crit = model.build_criterion()
    opt = torch.optim.Adam(net.parameters(), lr=1e-3)
    batch = _batch()
    losses, box = [], []
    for _ in range(12):
        loss, items = crit(net(batch["img"]), batch)
        opt.zero_grad()
        loss.backward()
        opt.step()
        assert torch.isfinite(loss)
        losses.append(loss.item())
        box.append(items[1].item())
    assert sum(losses[-3:]) < 0.8 * sum(losses[:3]), losses
    assert box[-1] < 0.6 * box[0], box


def test_trainer_runs_and_the_checkpoint_reloads(tmp_path) -> None:  # noqa: ANN001 - pytest fixture
    _register()
    from libreyolo import LibreYOLO
    from libreyolo.data.shapes import ensure_shapes_dataset

    data = ensure_shapes_dataset(tmp_path / "shapes", n_train=8, n_val=4, imgsz=64)
    model = Model(RTMDet(size="t", nc=80))  # the dataset has fewer classes: the head is rebuilt
    result = model.train(data=str(data), imgsz=64, batch=4, workers=0, device="cpu", nbs=4, mosaic=0.0,
                         close_mosaic=0, warmup_epochs=0, optimizer="AdamW", lr0=0.002, verbose=False,
                         tensorboard=False, project=str(tmp_path / "runs"), seed=0, epochs=1)
    with open(f"{result['save_dir']}/results.csv", newline="") as f:
        rows = list(csv.DictReader(f))
    assert len(rows) == 1
    assert {"train/cls_loss", "train/box_loss"} <= set(rows[0])
    assert all(float(rows[0][k]) >= 0 for k in ("train/cls_loss", "train/box_loss"))
    loaded = LibreYOLO(result["best"])
    assert isinstance(loaded.family, RTMDet) and loaded.nc == model.nc == 6 and loaded.size == "t"
    x = torch.rand(1, 3, 64, 64)
    with torch.no_grad():
        for a, b in zip(model.net.eval()(x), loaded.net.eval()(x), strict=True):
            assert torch.equal(a, b)
