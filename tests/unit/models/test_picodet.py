"""PicoDet: network contract, parameter counts, ESNet blocks, fusing, postprocessing and the
captured decode, the SimOTA assigner, the losses, training steps, the trainer and validation,
registry names and prediction (CPU, tiny inputs)."""

from __future__ import annotations

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
from libreyolo.models.picodet.esnet import ESBlock, ESBlockDS, SEModule, channel_shuffle
from libreyolo.models.picodet.family import PicoDet
from libreyolo.models.picodet.loss import PicoDetLoss, SimOTAAssigner, varifocal_loss
from libreyolo.models.picodet.nn import build_picodet
from libreyolo.models.picodet.postprocess import anchor_grid, decode, decode_boxes, postprocess
from libreyolo.models.picodet.variants import VARIANTS
from libreyolo.ops.anchors import flatten_levels
from libreyolo.ops.boxes import bbox_giou
from libreyolo.ops.targets import build_targets
from libreyolo.registry import parse_weights_name, register_family

STRIDES = (8, 16, 32, 64)
BINS = 8


@pytest.fixture(autouse=True)
def _one_thread() -> Iterator[None]:
    n = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(n)


def _register() -> None:
    register_family(PicoDet)  # a no-op when models/__init__.py registered it already


# --------------------------------------------------------------------------- network


@pytest.mark.parametrize("size", ["s", "m", "l"])
def test_param_count_matches_published_table(size: str) -> None:
    n = sum(p.numel() for p in build_picodet(size=size, nc=80).parameters()) / 1e6
    assert abs(n / VARIANTS[size].paper_params_m - 1) < 0.03, f"{size}: {n:.3f}M"


def test_forward_shapes_train_and_eval_with_a_ceil_level() -> None:
    net = build_picodet(size="s", nc=5)
    x = torch.rand(2, 3, 96, 64)  # 96 / 64 is not whole: the stride-64 level rounds up
    for mode in (True, False):
        net.train(mode)
        out = net(x)
        assert [tuple(o.shape) for o in out] == [(2, 5 + 32, -(-96 // s), -(-64 // s)) for s in STRIDES]


def test_head_has_no_weights_shared_between_levels_and_starts_at_the_prior() -> None:
    net = build_picodet(size="s", nc=80)
    assert len(net.head.convs) == 4 and len(net.head.convs[0]) == VARIANTS["s"].head_convs == 2
    assert len({id(p) for lvl in net.head.convs for p in lvl.parameters()}) == \
        sum(1 for lvl in net.head.convs for _ in lvl.parameters())
    dw = [m for m in net.head.modules() if isinstance(m, nn.Conv2d) and m.groups > 1]
    assert dw and all(m.kernel_size == (5, 5) for m in dw)
    torch.testing.assert_close(net.head.pred[0].bias.sigmoid(), torch.full((112,), 0.01))
    assert all(m.eps == 1e-5 for m in net.modules() if isinstance(m, nn.BatchNorm2d))


def test_channel_shuffle_and_se_gate() -> None:
    x = torch.arange(6.0).view(1, 6, 1, 1)
    assert channel_shuffle(x, 2).flatten().tolist() == [0.0, 3.0, 1.0, 4.0, 2.0, 5.0]
    se = SEModule(8)
    with torch.no_grad():
        se.conv2.weight.zero_()
        se.conv2.bias.copy_(torch.tensor([-3.0, 0.0, 1.5, 3.0] * 2))  # hardsigmoid: 0, 0.5, 0.75, 1
    y = torch.rand(2, 8, 3, 3)
    torch.testing.assert_close(se(y), y * torch.tensor([0.0, 0.5, 0.75, 1.0] * 2).view(1, 8, 1, 1))


def test_es_block_keeps_the_first_half_untouched_and_shuffles() -> None:
    blk = ESBlock(16, 8).eval()
    x = torch.rand(1, 16, 4, 4)
    y = blk(x)
    torch.testing.assert_close(y[:, 0::2], x[:, :8])  # the shuffle puts the identity half at even channels
    assert ESBlockDS(16, 16, 32)(x).shape == (1, 32, 2, 2)


def test_fuse_keeps_eval_outputs() -> None:
    torch.manual_seed(0)
    net = build_picodet(size="s", nc=3).eval()
    randomise_norm_stats(net, seed=0)
    x = torch.rand(1, 3, 64, 64)
    with torch.no_grad():
        ref = net(x)
        net.fuse()
        out = net(x)
    assert not any(isinstance(m, nn.BatchNorm2d) for m in net.modules())
    for a, b in zip(ref, out, strict=True):
        torch.testing.assert_close(b, a, rtol=1e-4, atol=1e-4)


def test_bad_size_and_nc_raise_and_names_resolve() -> None:
    with pytest.raises(ConfigError, match="sizes"):
        build_picodet(size="q", nc=80)
    with pytest.raises(ConfigError, match="nc"):
        build_picodet(size="s", nc=0)
    _register()
    for s in ("s", "m", "l"):
        p = parse_weights_name(f"LibrePicoDet{s}.pt")
        assert (p.family, p.size, p.task) == ("picodet", s, "detect")
    assert (PicoDet(size="s").imgsz, PicoDet(size="m").imgsz) == (320, 416)


# --------------------------------------------------------------------------- postprocess


def _raw(nc: int, hw: tuple[int, int] = (64, 64)) -> list[Tensor]:
    """Confident background everywhere (class logits -20), uniform distance logits."""
    out = []
    for s in STRIDES:
        r = torch.zeros(1, nc + 4 * BINS, -(-hw[0] // s), -(-hw[1] // s))
        r[:, :nc] = -20.0
        out.append(r)
    return out


def _set_box(level: Tensor, nc: int, row: int, col: int, dists: tuple[int, int, int, int]) -> None:
    """Distance logits peaked (+30) on the given bins: the expectation is that bin."""
    for side, d in enumerate(dists):
        level[0, nc + side * BINS:nc + (side + 1) * BINS, row, col] = -30.0
        level[0, nc + side * BINS + d, row, col] = 30.0


def test_anchor_points_are_cell_centres() -> None:
    pts, st = anchor_grid([(1, 2), (1, 1)], (8, 16))
    assert (pts * st).tolist() == [[4.0, 4.0], [12.0, 4.0], [8.0, 8.0]]


def test_postprocess_decodes_distributions_and_suppresses() -> None:
    net = SimpleNamespace(nc=2, strides=STRIDES, reg_max=BINS)
    raw = _raw(2)
    # stride 8, row 2, col 3 -> centre (28, 20); distances 1, 1, 2, 2 strides -> (20, 12, 44, 36)
    _set_box(raw[0], 2, 2, 3, (1, 1, 2, 2))
    raw[0][0, 1, 2, 3] = 2.0
    _set_box(raw[0], 2, 2, 4, (2, 1, 1, 2))  # centre (36, 20): the same box, lower score
    raw[0][0, 1, 2, 4] = 1.0
    _set_box(raw[3], 2, 0, 0, (0, 0, 1, 1))  # stride 64, centre (32, 32): (32, 32, 96, 96)
    raw[3][0, 0, 0, 0] = 3.0
    dets = postprocess(raw, net=net, conf=0.3, iou=0.5, classes=None, max_det=100, agnostic=False)[0]
    expect = torch.tensor([[32.0, 32.0, 96.0, 96.0, torch.tensor(3.0).sigmoid().item(), 0.0],
                           [20.0, 12.0, 44.0, 36.0, torch.tensor(2.0).sigmoid().item(), 1.0]])
    torch.testing.assert_close(dets, expect)
    only0 = postprocess(raw, net=net, conf=0.3, iou=0.5, classes=[0], max_det=100, agnostic=False)[0]
    assert only0.shape[0] == 1 and only0[0, 5] == 0.0
    with pytest.raises(ConfigError, match="classes"):
        postprocess(_raw(3), net=net, conf=0.3, iou=0.5, classes=None, max_det=10, agnostic=False)
    with pytest.raises(ConfigError, match="levels"):
        postprocess(raw[:3], net=net, conf=0.3, iou=0.5, classes=None, max_det=10, agnostic=False)


def test_captured_decode_holds_the_eager_candidates() -> None:
    torch.manual_seed(0)
    _register()
    model = Model(PicoDet(size="s", nc=3))
    net = model.net.eval()
    with torch.no_grad():
        raw = net(torch.rand(2, 3, 64, 64))
    cands = model.family.decode(raw)
    n_pairs = sum(r.shape[2] * r.shape[3] for r in raw) * 3
    assert cands.shape == (2, min(1000, n_pairs), 6)
    assert (cands[:, :-1, 4] >= cands[:, 1:, 4]).all()
    torch.testing.assert_close(cands, decode(raw, net=net, k=1000))  # cached grid == fresh grid
    eager = postprocess(raw, net=net, conf=0.0, iou=1.0, classes=None, max_det=10_000, agnostic=False)
    for b in range(2):  # iou=1 keeps every pair: the same set as the decode's (all pairs here)
        a = eager[b][eager[b][:, 4].argsort(descending=True, stable=True)]
        assert a.shape == cands[b].shape
        torch.testing.assert_close(a[:, 4], cands[b, :, 4])
        key = lambda t: sorted(map(tuple, t.round(decimals=3).tolist()))  # noqa: E731
        assert key(a) == key(cands[b])


def test_decode_then_select_equals_the_eager_postprocess() -> None:
    from libreyolo.ops.candidates import select_detections

    torch.manual_seed(0)
    model = Model(PicoDet(size="s", nc=3))
    gen = torch.Generator().manual_seed(1)
    with torch.no_grad():
        raw = list(model.net.eval()(torch.rand(2, 3, 128, 160, generator=gen)))
    for r in raw:  # lift some class logits so that tens of candidates pass conf=0.25
        r[:, :3] += 10.0 * torch.rand(r[:, :3].shape, generator=gen)
    ref = model.postprocess(raw, conf=0.25, iou=0.6, classes=None, max_det=50, agnostic=False)
    got = select_detections(model.family.decode(raw), conf=0.25, iou=0.6, max_det=50, agnostic=False)
    assert sum(len(r) for r in ref) > 10
    for a, b in zip(ref, got, strict=True):
        assert a.shape == b.shape
        torch.testing.assert_close(b, a.float(), rtol=1e-5, atol=1e-4)


# --------------------------------------------------------------------------- assigner


def _pad(labels: list[list[int]], boxes: list[list[list[float]]]) -> tuple[Tensor, Tensor, Tensor]:
    b, m = len(labels), max((len(x) for x in labels), default=0)
    gl, gb, mask = torch.zeros(b, m, dtype=torch.long), torch.zeros(b, m, 4), torch.zeros(b, m, dtype=torch.bool)
    for i, (lab, box) in enumerate(zip(labels, boxes, strict=True)):
        if lab:
            gl[i, :len(lab)], gb[i, :len(lab)], mask[i, :len(lab)] = torch.tensor(lab), torch.tensor(box), True
    return gl, gb, mask


def _grid_4x4() -> tuple[Tensor, Tensor]:
    pts, st = anchor_grid([(4, 4)], (8,))
    return pts * st, st[:, 0]  # centres 4, 12, 20, 28 on each axis


def _pid(x: int, y: int) -> int:
    return (y // 8) * 4 + x // 8


def test_assigner_takes_dynamic_k_best_points() -> None:
    pts, st = _grid_4x4()
    gt = [6.0, 6.0, 22.0, 22.0]  # centres (12, 12), (20, 12), (12, 20), (20, 20) inside
    pred = torch.cat((pts - 1.0, pts + 1.0), -1)[None].repeat(2, 1, 1)  # tiny boxes: IoU ~0.016
    pred[0, _pid(12, 12)] = torch.tensor(gt)  # two exact boxes: top-10 IoU sum 2.0x -> k = 2
    pred[0, _pid(20, 20)] = torch.tensor(gt)
    scores = torch.full((2, 16, 3), 0.1)
    t = SimOTAAssigner()(scores, pred, pts, st, *_pad([[2], []], [[gt], []]))
    fg = t.fg_mask[0].nonzero().squeeze(1).tolist()
    assert fg == sorted([_pid(12, 12), _pid(20, 20)])
    assert t.labels[0, fg].tolist() == [2, 2] and t.bboxes[0, fg].tolist() == [gt, gt]
    torch.testing.assert_close(t.ious[0, fg], torch.ones(2))
    assert not t.fg_mask[1].any() and t.ious[0, ~t.fg_mask[0]].abs().sum() == 0


def test_assigner_candidates_and_the_outside_cost() -> None:
    pts, st = anchor_grid([(8, 8)], (8,))
    pts, st = pts * st, st[:, 0]  # centres 4, 12, ..., 60

    def pid(x: int, y: int) -> int:
        return (y // 8) * 8 + x // 8

    gt = [9.0, 9.0, 15.0, 15.0]  # holds only centre (12, 12); the centre region (+-20 px) 4 x 4 points
    pred = torch.cat((pts - 1.0, pts + 1.0), -1)[None]
    pred[0, pid(44, 44)] = torch.tensor(gt)  # exact, but outside the box and the centre region
    pred[0, pid(20, 20)] = torch.tensor(gt)  # exact, in the centre region only: costs + 1e8
    scores = torch.full((1, 64, 2), 0.1)
    t = SimOTAAssigner()(scores, pred, pts, st, *_pad([[1]], [[gt]]))
    # k = int(1.0 + small IoUs) = 1 ((44, 44) is no candidate); (12, 12), in box and centre region,
    # wins over the exact (20, 20)
    assert t.fg_mask[0].nonzero().squeeze(1).tolist() == [pid(12, 12)]
    pred[0, pid(12, 12)] = torch.tensor([30.0, 30.0, 32.0, 32.0])  # IoU 0 now
    pred[0, pid(4, 4)] = torch.tensor(gt)  # two exact candidates in the centre region: k = 2
    t = SimOTAAssigner()(scores, pred, pts, st, *_pad([[1]], [[gt]]))
    # the pair in box and centre region first, then the cheapest outside it: exact (4, 4) or (20, 20)
    fg = t.fg_mask[0].nonzero().squeeze(1).tolist()
    assert len(fg) == 2 and pid(12, 12) in fg and (pid(4, 4) in fg or pid(20, 20) in fg)
    assert pid(44, 44) not in fg


def test_assigner_gives_a_contested_point_to_its_cheapest_box() -> None:
    pts, st = _grid_4x4()
    box_a, box_b = [6.0, 6.0, 22.0, 22.0], [10.0, 10.0, 30.0, 30.0]
    pred = torch.cat((pts - 1.0, pts + 1.0), -1)[None]
    pred[0, _pid(20, 20)] = torch.tensor(box_a)  # IoU 1 with A, 144 / 356 with B
    t = SimOTAAssigner()(torch.full((1, 16, 2), 0.1), pred, pts, st, *_pad([[1, 0]], [[box_b, box_a]]))
    assert t.fg_mask[0, _pid(20, 20)] and t.gt_idx[0, _pid(20, 20)] == 1 and t.labels[0, _pid(20, 20)] == 0


def _reference_assign(p: Tensor, pred: Tensor, pts: Tensor, st: Tensor, gl: Tensor, gb: Tensor) -> tuple[Tensor, Tensor]:
    """The recipe written plainly for one image, on the candidate subset, with the full
    (candidates x boxes x classes) Varifocal target and a loop over boxes."""
    a, m = pred.shape[0], gb.shape[0]
    fg, gt_idx = torch.zeros(a, dtype=torch.bool), torch.zeros(a, dtype=torch.long)
    in_box = torch.stack([((pts > b[:2]) & (pts < b[2:])).all(-1) for b in gb], 1)  # (A, M)
    centre = (gb[:, :2] + gb[:, 2:]) / 2
    in_ctr = ((pts[:, None] - centre[None]).abs() < 2.5 * st[:, None, None]).all(-1)
    valid = (in_box | in_ctr).any(1)
    vp, vb = p[valid], pred[valid]
    iou, giou = bbox_giou(vb[:, None], gb[None])  # (V, M)
    soft = F.one_hot(gl, p.shape[1]).float()[None] * iou[..., None]  # (V, M, C)
    x = vp[:, None, :].expand_as(soft)
    focal = torch.where(soft > 0, soft, 0.75 * (x - soft).abs().pow(2))
    cost = (F.binary_cross_entropy(x, soft, reduction="none") * focal).sum(-1) + 6 * (1 - giou) \
        + 1e8 * (~(in_box & in_ctr)[valid]).float()
    ks = iou.topk(min(10, iou.shape[0]), dim=0).values.sum(0).int().clamp(min=1)
    match = torch.zeros_like(cost, dtype=torch.bool)
    for j in range(m):
        match[cost[:, j].topk(int(ks[j]), largest=False).indices, j] = True
    multi = match.sum(1) > 1
    match[multi] = F.one_hot(cost[multi].argmin(1), m).bool()
    vfg = match.any(1)
    fg[valid] = vfg
    gt_idx[valid] = torch.where(vfg, match.to(torch.uint8).argmax(1), 0)
    return fg, gt_idx


def test_batched_assigner_equals_the_plain_recipe_on_random_cases() -> None:
    g = torch.Generator().manual_seed(0)
    pts, st = anchor_grid([(8, 8), (4, 4), (2, 2), (1, 1)], STRIDES)
    pts, st = pts * st, st[:, 0]
    a, nc, counts = pts.shape[0], 4, [3, 0, 1, 5]
    gl, gb, mask = _pad([[0] * n for n in counts], [[[0.0] * 4] * n for n in counts])
    for i, n in enumerate(counts):
        xy = torch.rand(n, 2, generator=g) * 30
        gb[i, :n] = torch.cat((xy, (xy + torch.rand(n, 2, generator=g) * 30 + 8).clamp(max=64)), 1)
        gl[i, :n] = torch.randint(0, nc, (n,), generator=g)
    scores = torch.rand(4, a, nc, generator=g)
    dist = torch.rand(4, a, 4, generator=g) * 3 * st[None, :, None]
    pred = torch.cat((pts - dist[..., :2], pts + dist[..., 2:]), -1)
    t = SimOTAAssigner()(scores, pred, pts, st, gl, gb, mask)
    n_fg = 0
    for i, n in enumerate(counts):
        if n == 0:
            assert not t.fg_mask[i].any()
            continue
        fg, idx = _reference_assign(scores[i], pred[i], pts, st, gl[i, :n], gb[i, :n])
        assert torch.equal(t.fg_mask[i], fg), f"image {i}"
        assert torch.equal(torch.where(t.fg_mask[i], t.gt_idx[i], 0), idx)
        n_fg += int(fg.sum())
    assert n_fg >= 6


# --------------------------------------------------------------------------- losses / training


def test_varifocal_loss_values() -> None:
    x = torch.tensor([[0.0, 2.0, 0.0]])
    t = torch.tensor([[0.6, 0.0, 0.0]])
    s2 = 1 / (1 + math.exp(-2.0))
    want = torch.tensor([[math.log(2) * 0.6,  # positive: BCE(0, 0.6) = log 2, weighted by 0.6
                          math.log1p(math.exp(2.0)) * 0.75 * s2**2,  # negative: alpha * p^2
                          math.log(2) * 0.75 * 0.25]])
    torch.testing.assert_close(varifocal_loss(x, t), want)


def _batch() -> dict[str, Tensor]:
    return {"img": torch.rand(2, 3, 64, 64, generator=torch.Generator().manual_seed(1)),
            "batch_idx": torch.tensor([0, 0, 1]), "cls": torch.tensor([0, 2, 1]),
            "bboxes": torch.tensor([[0.3, 0.3, 0.3, 0.4], [0.7, 0.6, 0.4, 0.3], [0.5, 0.5, 0.6, 0.6]])}


def _model(nc: int = 3) -> Model:
    torch.manual_seed(0)
    model = Model(PicoDet(size="s", nc=nc))
    with torch.no_grad():  # scores of 0.5 instead of the 0.01 prior: the box weights are not ~0
        for conv in model.net.head.pred:
            conv.bias[:nc].zero_()
    return model


def test_loss_values_follow_the_recipe() -> None:
    model = _model()
    crit = model.build_criterion()
    assert isinstance(crit, PicoDetLoss) and PicoDet.LOSS_NAMES == ("vfl", "giou", "dfl")
    batch = _batch()
    with torch.no_grad():
        preds = model.net.eval()(batch["img"])
    loss, items = crit(preds, batch)
    torch.testing.assert_close(loss, items.sum() * 2)
    flat = flatten_levels(preds)
    logits, reg = flat[:, :3].transpose(1, 2), flat[:, 3:]
    pts, st = anchor_grid([tuple(p.shape[2:]) for p in preds], STRIDES)
    boxes = decode_boxes(reg, pts, st, bins=BINS)  # pixels
    t = crit.assigner(logits.sigmoid(), boxes, pts * st, st[:, 0],
                      *build_targets(batch, batch_size=2, img_hw=(64, 64), device=torch.device("cpu")))
    fg = t.fg_mask
    assert fg.sum() >= 3
    target = torch.zeros_like(logits)
    target[fg, t.labels[fg]] = bbox_giou(boxes[fg], t.bboxes[fg])[0]
    n_pos = sum(max(int(f.sum()), 1) for f in fg)
    want_vfl = varifocal_loss(logits, target).sum() / n_pos
    w = logits.sigmoid().amax(-1)[fg]
    want_giou = 2.0 * ((1 - bbox_giou(boxes[fg], t.bboxes[fg])[1]) * w).sum() / w.sum().clamp(min=1)
    fg_boxes = t.bboxes[fg]  # (n, 4); a mask then a slice in one index reads another dim on torch 2.8
    ltrb = torch.cat(((pts * st)[None].expand(2, -1, -1)[fg] - fg_boxes[:, :2],
                      fg_boxes[:, 2:] - (pts * st)[None].expand(2, -1, -1)[fg]), 1) / st[None].expand(2, -1, -1)[fg]
    ltrb = ltrb.clamp(0, BINS - 1 - 0.01)
    lg = reg.transpose(1, 2)[fg].reshape(-1, 4, BINS)
    lo = ltrb.floor().long()
    ce = lambda k: F.cross_entropy(lg.reshape(-1, BINS), k.reshape(-1), reduction="none").view(-1, 4)  # noqa: E731
    dfl = (ce(lo) * (lo + 1 - ltrb) + ce(lo + 1) * (ltrb - lo)).mean(1)
    want_dfl = 0.25 * (dfl * w).sum() / w.sum().clamp(min=1)
    torch.testing.assert_close(items, torch.stack((want_vfl, want_giou, want_dfl)), rtol=1e-5, atol=1e-6)


def test_loss_on_images_without_boxes_and_gradients() -> None:
    model = _model()
    net, crit, batch = model.net.train(), model.build_criterion(), _batch()
    loss, _ = crit(net(batch["img"]), batch)
    loss.backward()
    assert net.head.pred[0].weight.grad[3:].abs().sum() > 0  # the box losses reach the distance logits
    net.zero_grad()
    empty = {"img": batch["img"], "batch_idx": torch.zeros(0, dtype=torch.long),
             "cls": torch.zeros(0, dtype=torch.long), "bboxes": torch.zeros(0, 4)}
    loss, items = crit(net(batch["img"]), empty)
    assert torch.isfinite(loss) and items[0] > 0 and items[1] == 0 and items[2] == 0
    loss.backward()
    assert net.head.pred[0].bias.grad[:3].abs().sum() > 0


def test_train_steps_decrease_the_loss() -> None:
    model = _model()
    net, crit, batch = model.net.train(), model.build_criterion(), _batch()
    opt = torch.optim.Adam(net.parameters(), lr=2e-3)
    hist = []
    for _ in range(12):
        loss, items = crit(net(batch["img"]), batch)
        opt.zero_grad()
        loss.backward()
        opt.step()
        assert torch.isfinite(loss)
        hist.append([loss.item(), *items.tolist()])
    total, _, giou, dfl = zip(*hist, strict=True)
    assert sum(total[-3:]) < 0.6 * sum(total[:3]), total
    assert giou[-1] < 0.7 * giou[0] and dfl[-1] < 0.8 * dfl[0], (giou, dfl)


def test_predict_train_on_shapes_val_and_reload(tmp_path) -> None:  # noqa: ANN001 - pytest fixture
    _register()
    from libreyolo import SAMPLE_IMAGE, LibreYOLO
    from libreyolo.data.shapes import ensure_shapes_dataset

    model = LibreYOLO("LibrePicoDets.pt", pretrained=False, nc=3)
    assert isinstance(model.family, PicoDet) and model.nc == 3
    (res,) = model.predict(SAMPLE_IMAGE, conf=0.0, max_det=7, imgsz=128, device="cpu")
    assert len(res.boxes) == 7 and set(torch.as_tensor(res.boxes.cls).tolist()) <= {0.0, 1.0, 2.0}
    conf = torch.as_tensor(res.boxes.conf)
    assert ((conf > 0.001) & (conf < 0.1)).all()  # the head's 0.01 prior
    res.save(str(tmp_path / "pred.jpg"))
    assert (tmp_path / "pred.jpg").stat().st_size > 0

    data = ensure_shapes_dataset(tmp_path / "shapes", n_train=8, n_val=4, imgsz=64)
    model = Model(PicoDet(size="s", nc=80))  # the dataset has 6 classes: the head is rebuilt
    result = model.train(data=str(data), imgsz=64, batch=4, workers=0, device="cpu", nbs=4, mosaic=0.0,
                         close_mosaic=0, warmup_epochs=0, optimizer="AdamW", lr0=0.002, verbose=False,
                         tensorboard=False, project=str(tmp_path / "runs"), seed=0, epochs=1)
    assert 0.0 <= result["mAP50-95"] <= result["mAP50"] <= 1.0
    metrics = model.val(data=str(data), imgsz=64, batch=4, device="cpu", workers=0, verbose=False)
    assert 0.0 <= metrics["mAP50-95"] <= metrics["mAP50"] <= 1.0
    loaded = LibreYOLO(result["best"])
    assert isinstance(loaded.family, PicoDet) and loaded.nc == model.nc == 6 and loaded.size == "s"
    x = torch.rand(1, 3, 64, 64)
    with torch.no_grad():
        for a, b in zip(model.net.eval()(x), loaded.net.eval()(x), strict=True):
            assert torch.equal(a, b)
