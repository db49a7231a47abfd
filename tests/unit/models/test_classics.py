"""The classic anchor-based YOLOs (yolo2, yolo3, yolo4; the shared Darknet lineage in models/_darknet):
parameter counts, network contract, decode on hand-made head outputs, assignment, loss, the
Darknet .weights reader, predict / train / val on the shapes demo data (CPU, tiny inputs)."""

from __future__ import annotations

import csv
import hashlib
import math
import os
from collections.abc import Callable
from pathlib import Path

import numpy as np
import pytest
import torch
from torch import Tensor, nn

from libreyolo.errors import CheckpointError, ConfigError
from libreyolo.graphs.parity import randomise_norm_stats
from libreyolo.layers.conv import ConvBNAct
from libreyolo.model import Model
from libreyolo.models._darknet.blocks import CSPStage, PoolPyramid, Reorg, darknet_convs
from libreyolo.models._darknet.convert import float_count, write_weights
from libreyolo.models._darknet.head import AnchorHead
from libreyolo.models._darknet.loss import AnchorYOLOLoss, assign_anchors
from libreyolo.models._darknet.postprocess import decode, level_view, postprocess
from libreyolo.models._darknet.tiny import PoolStride1, TinyCSPBlock
from libreyolo.models.yolo2 import nn as v2
from libreyolo.models.yolo2.family import YOLO2
from libreyolo.models.yolo3 import nn as v3
from libreyolo.models.yolo3.family import YOLO3
from libreyolo.models.yolo4 import nn as v4
from libreyolo.models.yolo4.family import YOLO4
from libreyolo.registry import parse_weights_name, register_family

BUILDERS: dict[str, Callable[..., nn.Module]] = {"yolo2": v2.build_yolo2, "yolo3": v3.build_yolo3,
                                                 "yolo4": v4.build_yolo4}
FAMS = {"yolo2": YOLO2, "yolo3": YOLO3, "yolo4": YOLO4}
PAPER = {"yolo2": v2.PAPER_PARAMS_M, "yolo3": v3.PAPER_PARAMS_M["b"], "yolo4": v4.PAPER_PARAMS_M["b"]}
CFG_COUNTS = {"yolo2": 50_962_889, "yolo3": 61_949_149, "yolo4": 64_363_101}  # yolov{2,3,4}.cfg at 80 classes
CFG_CONVS = {"yolo2": 23, "yolo3": 75, "yolo4": 110}  # [convolutional] layers of yolov{2,3,4}.cfg
NA = {"yolo2": 5, "yolo3": 3, "yolo4": 3}
STRIDES = {"yolo2": (32,), "yolo3": (8, 16, 32), "yolo4": (8, 16, 32)}


@pytest.fixture(autouse=True, scope="module")
def _one_thread():
    n = torch.get_num_threads()
    torch.set_num_threads(1)
    for fam in FAMS.values():
        register_family(fam)
    yield
    torch.set_num_threads(n)


@pytest.fixture(scope="module")
def nets80() -> dict[str, nn.Module]:
    torch.manual_seed(0)
    return {k: b(nc=80).eval() for k, b in BUILDERS.items()}


def _n(net: nn.Module) -> int:
    return sum(p.numel() for p in net.parameters())


# --------------------------------------------------------------------------- network


@pytest.mark.parametrize("fam", list(BUILDERS))
def test_param_count_matches_paper_and_cfg(nets80: dict[str, nn.Module], fam: str) -> None:
    """Unfused (trainable, BatchNorm affine terms included) count, as Darknet reports it: equal to
    the reference cfg's count and within 3% of the published one (YOLOv3 61.9M, YOLOv4 64.4M)."""
    n = _n(nets80[fam])
    assert n == CFG_COUNTS[fam]
    assert abs(n - PAPER[fam] * 1e6) / (PAPER[fam] * 1e6) < 0.03
    assert len(darknet_convs(nets80[fam].darknet_order())) == CFG_CONVS[fam]
    # every conv of the net is in the Darknet order exactly once
    convs = [c for c, _ in darknet_convs(nets80[fam].darknet_order())]
    assert len({id(c) for c in convs}) == len(convs) == sum(isinstance(m, nn.Conv2d) for m in nets80[fam].modules())


@pytest.mark.parametrize("fam", list(BUILDERS))
@pytest.mark.parametrize("mode", ["train", "eval"])
def test_outputs_per_level(nets80: dict[str, nn.Module], fam: str, mode: str) -> None:
    net = nets80[fam]
    net.train(mode == "train")
    try:
        with torch.no_grad():
            out = net(torch.rand(2, 3, 64, 96))
    finally:
        net.eval()
    assert isinstance(out, list) and len(out) == len(STRIDES[fam])
    for o, s in zip(out, STRIDES[fam], strict=True):
        assert o.shape == (2, NA[fam] * 85, 64 // s, 96 // s) and torch.isfinite(o).all()


def test_architecture_blocks(nets80: dict[str, nn.Module]) -> None:
    y3, y4 = nets80["yolo3"], nets80["yolo4"]
    assert any(isinstance(m, nn.LeakyReLU) for m in y3.modules()) and not any(isinstance(m, nn.Mish) for m in y3.modules())
    assert all(isinstance(m.act, nn.Mish) for m in y4.backbone.modules() if hasattr(m, "act"))
    assert not any(isinstance(m, nn.Mish) for m in y4.bu5.modules())
    assert [len(s.blocks) for s in y3.backbone.stages] == [1, 2, 8, 8, 4]
    assert [len(s.blocks) for s in y4.backbone.stages] == [1, 2, 8, 8, 4]
    torch.testing.assert_close(y3.head.anchors[2], torch.tensor([[116.0, 90], [156, 198], [373, 326]]))
    torch.testing.assert_close(y4.head.anchors[0], torch.tensor([[12.0, 16], [19, 36], [40, 28]]))
    assert y3.head.scale_xy == (1.0, 1.0, 1.0) and y4.head.scale_xy == (1.2, 1.1, 1.05)
    first, second = y4.backbone.stages[0], y4.backbone.stages[1]  # the first CSP stage keeps full width
    assert first.split1.conv.out_channels == 64 and first.blocks[0].cv1.conv.out_channels == 32
    assert second.split1.conv.out_channels == 64 and second.blocks[0].cv1.conv.out_channels == 64
    assert y3.backbone.stem.bn.eps == 1e-5 and "head.anchors" in y3.state_dict()


def test_yolo3_spp_size() -> None:
    """YOLOv3-SPP (yolov3-spp.cfg): 62,998,749 parameters vs the published 63.0 M, 76 convs, the
    pool pyramid between the third and fourth conv of the stride-32 set."""
    torch.manual_seed(0)
    net = v3.build_yolo3(size="spp", nc=80).eval()
    assert _n(net) == 62_998_749
    assert abs(_n(net) - v3.PAPER_PARAMS_M["spp"] * 1e6) / (v3.PAPER_PARAMS_M["spp"] * 1e6) < 0.03
    assert len(darknet_convs(net.darknet_order())) == 76 and isinstance(net.set5[1], PoolPyramid)
    assert hashlib.sha256(repr(net_layout(net)).encode()).hexdigest()[:16] == CFG_DIGESTS["yolo3-spp"]
    folder = os.environ.get("LIBREYOLO_DARKNET_CFG_DIR")
    if folder and (Path(folder) / "yolov3-spp.cfg").is_file():
        assert cfg_layout((Path(folder) / "yolov3-spp.cfg").read_text()) == net_layout(net)
    assert parse_weights_name("LibreYOLO3spp.pt").size == "spp"
    with torch.no_grad():
        assert [tuple(o.shape) for o in net(torch.rand(1, 3, 64, 64))] == [(1, 255, 8, 8), (1, 255, 4, 4), (1, 255, 2, 2)]


def test_darknet_file_of_the_spp_layout_loads_as_spp(tmp_path: Path) -> None:
    from libreyolo import LibreYOLO

    torch.manual_seed(6)
    net = v3.build_yolo3(size="spp", nc=4)
    randomise_norm_stats(net, seed=3)
    net.eval()
    model = LibreYOLO(str(write_weights(net, tmp_path / "yolov3-spp.weights")))
    assert (model.family.FAMILY, model.size, model.nc) == ("yolo3", "spp", 4)
    x = torch.rand(1, 3, 64, 64)
    with torch.no_grad():
        for a, b in zip(net(x), model.net.eval()(x), strict=True):
            assert torch.equal(a, b)


@pytest.mark.parametrize("fam", list(BUILDERS))
def test_untrained_eval_outputs_depend_on_the_input(nets80: dict[str, nn.Module], fam: str) -> None:
    """Darknet's init (std sqrt(2 / fan_in)) and identity residual units keep an untrained
    eval-mode network's signal alive: with PyTorch's default init its outputs were constant to
    1e-8 (class scores tied, parity rows vacuous)."""
    torch.manual_seed(5)
    net = nets80[fam]
    with torch.no_grad():
        a, b = net(torch.rand(1, 3, 64, 64)), net(torch.rand(1, 3, 64, 64))
    for ra, rb in zip(a, b, strict=True):
        va, vb = level_view(ra, NA[fam]), level_view(rb, NA[fam])
        assert (va[..., :4] - vb[..., :4]).abs().mean() > 1e-3
        spread = (va[..., 5:] - va[..., 5:].mean(-1, keepdim=True)).abs().mean()
        assert 1e-3 < spread < 10.0


def test_yolo2_voc_count_and_passthrough() -> None:
    """The quoted 50.7M is yolov2.cfg's count at VOC's 20 classes (50,655,389)."""
    assert _n(v2.build_yolo2(nc=20)) == 50_655_389
    net = v2.build_yolo2(nc=1)
    # the cfg's anchors are in stride-32 grid cells; the head keeps them in input pixels
    torch.testing.assert_close(net.head.anchors[0, 0], torch.tensor([0.57273 * 32, 0.677385 * 32]))
    assert net.head.cls_act == "softmax" and net.fuse_conv.conv.in_channels == 256 + 1024


def _reorg_cpu_reference(x: np.ndarray, stride: int = 2) -> np.ndarray:
    """Darknet's ``reorg_cpu(input, w, h, c, batch, stride, forward=0, output)`` as written (one
    image): the literal index arithmetic, to check :class:`Reorg` against."""
    c, h, w = x.shape
    src, out = x.ravel(), np.zeros(x.size, x.dtype)
    out_c = c // (stride * stride)
    for k in range(c):
        for j in range(h):
            for i in range(w):
                in_index = i + w * (j + h * k)
                c2, offset = k % out_c, k // out_c
                w2, h2 = i * stride + offset % stride, j * stride + offset // stride
                out[in_index] = src[w2 + w * stride * (h2 + h * stride * c2)]
    return out.reshape(c * stride * stride, h // stride, w // stride)


def test_reorg_is_darknets_memory_order() -> None:
    x = torch.arange(2 * 8 * 4 * 6, dtype=torch.float32).view(2, 8, 4, 6)
    y = Reorg()(x)
    assert y.shape == (2, 32, 2, 3)
    for b in range(2):
        assert np.array_equal(y[b].numpy(), _reorg_cpu_reference(x[b].numpy()))
    assert not torch.equal(y, torch.nn.functional.pixel_unshuffle(x, 2))  # not a plain space-to-depth


def test_csp_stage_and_pool_pyramid_concatenation_order() -> None:
    """CSPStage fuses cat(transition, first split); the SPP block is cat(pool13, pool9, pool5, x)."""
    m = CSPStage(4, 8, 1).eval()
    seen: list[Tensor] = []
    m.fuse_conv.register_forward_hook(lambda mod, inp, out: seen.append(inp[0]))
    parts: dict[str, Tensor] = {}
    m.split1.register_forward_hook(lambda mod, inp, out: parts.__setitem__("part", out))
    m.transition.register_forward_hook(lambda mod, inp, out: parts.__setitem__("y", out))
    with torch.no_grad():
        m(torch.rand(1, 4, 8, 8))
    assert torch.equal(seen[0], torch.cat((parts["y"], parts["part"]), 1))
    x = torch.zeros(1, 1, 15, 15)
    x[0, 0, 7, 7] = 1.0
    y = PoolPyramid()(x)  # a single peak spreads 13, 9, 5, 1 pixels wide
    assert [int(y[0, c, 7].sum()) for c in range(4)] == [13, 9, 5, 1]


@pytest.mark.parametrize("fam", list(BUILDERS))
def test_fuse_equals_unfused(fam: str) -> None:
    torch.manual_seed(1)
    net = BUILDERS[fam](nc=3)
    randomise_norm_stats(net, seed=0)
    net.eval()
    x = torch.rand(1, 3, 64, 64)
    with torch.no_grad():
        ref = [o.clone() for o in net(x)]
        net.fuse()
        got = net(x)
    assert not any(isinstance(m, nn.BatchNorm2d) for m in net.modules())
    for r, g in zip(ref, got, strict=True):
        assert (r - g).abs().max().item() <= 1e-4 * max(1.0, r.abs().max().item())


def test_bad_size_and_nc_raise() -> None:
    for b in BUILDERS.values():
        with pytest.raises(ConfigError, match="no size"):
            b(size="x", nc=80)
        with pytest.raises(ConfigError, match="nc"):
            b(nc=0)


def test_weights_names_resolve() -> None:
    assert parse_weights_name("LibreYOLO3b.pt").family == "yolo3"
    assert parse_weights_name("LibreYOLO4b.pt").family == "yolo4"
    assert parse_weights_name("LibreYOLO2b.pt").family == "yolo2"
    assert parse_weights_name("LibreYOLO7b.pt").family == "yolo7"


# --------------------------------------------------------------------------- decode / postprocess


class _Meta(nn.Module):
    """Just what decode / postprocess read: a head with anchors, strides, scale_xy."""

    def __init__(self, nc: int, *, scale_xy: tuple[float, ...] = (1.0, 1.0, 1.0), cls_act: str = "sigmoid") -> None:
        super().__init__()
        self.nc, self.strides = nc, (8, 16, 32)
        self.head = AnchorHead(nc=nc, ch=(1, 1, 1), anchors=v3.ANCHORS, strides=(8, 16, 32), scale_xy=scale_xy,
                               cls_act=cls_act)


def _empty_raw(nc: int, hw: tuple[int, int] = (64, 64)) -> list[Tensor]:
    raw = []
    for s in (8, 16, 32):
        t = torch.zeros(1, 3 * (5 + nc), hw[0] // s, hw[1] // s)
        level_view(t, 3)[..., 4:] = -20.0
        raw.append(t)
    return raw


def _put(raw: list[Tensor], *, level: int, anchor: int, row: int, col: int,
         t: tuple[float, float, float, float] = (0.0, 0.0, 0.0, 0.0), obj: float = 5.0,
         cls: dict[int, float] | None = None) -> None:
    v = level_view(raw[level], 3)
    v[0, anchor, row, col, :4] = torch.tensor(t)
    v[0, anchor, row, col, 4] = obj
    for c, logit in (cls or {}).items():
        v[0, anchor, row, col, 5 + c] = logit


def _pp(raw: list[Tensor], meta: nn.Module, **kw: object) -> list[Tensor]:
    args = {"conf": 0.25, "iou": 0.45, "classes": None, "max_det": 300, "agnostic": False}
    args.update(kw)
    return postprocess(raw, net=meta, **args)  # type: ignore[arg-type]


def test_decode_sigmoid_offsets_exp_anchor_scaling_and_grid() -> None:
    raw = _empty_raw(4)
    # zero logits: centre of cell (col 3, row 2) of stride 8, size = anchor 1 (16 x 30 px)
    _put(raw, level=0, anchor=1, row=2, col=3, obj=5.0, cls={2: 4.0})
    # stride 32, anchor 2 (373 x 326), tx -> +inf (offset 1), ty = 0, tw = ln 0.5, th = ln 2
    _put(raw, level=2, anchor=2, row=1, col=0, t=(30.0, 0.0, math.log(0.5), math.log(2.0)), obj=6.0, cls={0: 6.0})
    (det,) = _pp(raw, _Meta(4))
    s5 = torch.sigmoid(torch.tensor(6.0)) ** 2
    torch.testing.assert_close(det[0, :4], torch.tensor([32 - 93.25, 48 - 326.0, 32 + 93.25, 48 + 326.0]))
    torch.testing.assert_close(det[0, 4], s5)
    assert det[0, 5].item() == 0.0
    torch.testing.assert_close(det[1, :4], torch.tensor([28.0 - 8, 20.0 - 15, 28.0 + 8, 20.0 + 15]))
    torch.testing.assert_close(det[1, 4], torch.sigmoid(torch.tensor(5.0)) * torch.sigmoid(torch.tensor(4.0)))
    assert det[1, 5].item() == 2.0


def test_scale_xy_stretches_the_offset_range() -> None:
    """YOLOv4's grid sensitivity: with scale 1.2, a saturated offset reaches 1.1 cells, not 1."""
    raw = _empty_raw(1)
    _put(raw, level=0, anchor=0, row=0, col=2, t=(30.0, -30.0, 0.0, 0.0), obj=6.0, cls={0: 6.0})
    (det,) = _pp(raw, _Meta(1, scale_xy=(1.2, 1.1, 1.05)))
    cx, cy = (2 + 1.1) * 8, (0 - 0.1) * 8
    torch.testing.assert_close(det[0, :4], torch.tensor([cx - 5, cy - 6.5, cx + 5, cy + 6.5]))


def test_softmax_classes() -> None:
    raw = _empty_raw(3)
    _put(raw, level=1, anchor=0, row=1, col=1, obj=6.0, cls={0: 2.0, 1: 2.0, 2: 2.0})
    (det,) = _pp(raw, _Meta(3, cls_act="softmax"), conf=0.1)
    torch.testing.assert_close(det[0, 4], torch.sigmoid(torch.tensor(6.0)) / 3)


def test_captured_decode_equals_postprocess_and_filters() -> None:
    torch.manual_seed(0)
    meta = _Meta(3)
    raw = [torch.randn(2, 24, 8, 8), torch.randn(2, 24, 4, 4), torch.randn(2, 24, 2, 2)]
    cands = decode(raw, net=meta, k=50)  # (B, k, 6) by decreasing score
    assert cands.shape == (2, 50, 6) and (cands[:, :-1, 4] >= cands[:, 1:, 4]).all()
    dets = _pp(raw, meta, conf=0.0, iou=1.01)  # no suppression: every anchor, sorted
    for b in range(2):
        torch.testing.assert_close(cands[b], dets[b][:50])
    with pytest.raises(ConfigError, match="different number of classes"):
        _pp(raw, _Meta(4))
    with pytest.raises(ConfigError, match="levels"):
        _pp(raw[:2], meta)
    (none,) = _pp(_empty_raw(3), meta, classes=[])
    assert none.shape == (0, 6)


# --------------------------------------------------------------------------- assignment / loss


def test_assignment_best_anchor_and_v4_threshold() -> None:
    """A 32 x 24 px box at (20, 36) of a 64 px input: its best shape match among the nine YOLOv3
    anchors is (33, 23) (level 0, anchor 2), at cell (col 2, row 4). With the 0.213 threshold the
    anchors (16, 30), (30, 61), (62, 45) and (59, 119)... whose shape-IoU exceed it are added."""
    t = torch.tensor([[0, 1, 20 / 64, 36 / 64, 32 / 64, 24 / 64]])
    anchors = torch.tensor(v3.ANCHORS, dtype=torch.float32)
    grids = [(8, 8), (4, 4), (2, 2)]
    best = assign_anchors(t, grids=grids, anchors=anchors, img_hw=(64, 64))
    assert [(p.a.tolist(), p.gj.tolist(), p.gi.tolist()) for p in best] == [([2], [4], [2]), ([], [], []), ([], [], [])]
    more = assign_anchors(t, grids=grids, anchors=anchors, img_hw=(64, 64), assign_thresh=0.213)
    flat = anchors.view(-1, 2)
    inter = torch.minimum(flat, torch.tensor([32.0, 24])).prod(1)
    iou = inter / (32 * 24 + flat.prod(1) - inter)
    want = sorted(int(i) for i in torch.nonzero(iou > 0.213).squeeze(1))
    got = sorted(3 * lvl + a for lvl, p in enumerate(more) for a in p.a.tolist())
    assert got == want and len(want) > 1
    # two boxes on the same anchor and cell: one positive, the first box
    t2 = torch.cat((t, torch.tensor([[0, 0, 21 / 64, 37 / 64, 32 / 64, 24 / 64]])))
    dup = assign_anchors(t2, grids=grids, anchors=anchors, img_hw=(64, 64))
    assert dup[0].gt.tolist() == [0]


def _batch() -> dict[str, Tensor]:
    return {"batch_idx": torch.tensor([0, 0, 1]), "cls": torch.tensor([0, 2, 1]),
            "bboxes": torch.tensor([[0.3, 0.3, 0.2, 0.25], [0.7, 0.6, 0.4, 0.3], [0.5, 0.5, 0.5, 0.4]])}


def test_ignore_rule_drops_the_background_loss_of_overlapping_negatives() -> None:
    """A confident prediction of a non-assigned anchor that lands on a ground truth costs
    objectness loss only when the ignore threshold is above its IoU."""
    meta = _Meta(2)
    raw = _empty_raw(2)
    # ground truth: 16 x 30 px at (28, 20) = anchor 1 of level 0 (its best) at cell (3, 2)
    batch = {"batch_idx": torch.tensor([0]), "cls": torch.tensor([1]), "bboxes": torch.tensor([[28 / 64, 20 / 64, 16 / 64, 30 / 64]])}
    _put(raw, level=0, anchor=1, row=2, col=3, obj=8.0, cls={1: 8.0})  # the positive, exact
    _put(raw, level=0, anchor=0, row=2, col=3, t=(0.0, 0.0, math.log(1.6), math.log(30 / 13)), obj=8.0)  # same box
    keep = AnchorYOLOLoss(meta, ignore_thresh=0.5)
    never = AnchorYOLOLoss(meta, ignore_thresh=1.01)
    _, a = keep(raw, batch)
    _, b = never(raw, batch)
    assert a[1] < b[1] * 0.5
    assert a[0] < 1e-4 and torch.isclose(a[0], b[0])  # exact box: (1 - GIoU) ~ 0


@pytest.mark.parametrize("fam", list(BUILDERS))
def test_loss_contract_and_decreases(fam: str) -> None:
    torch.manual_seed(0)
    model = Model(FAMS[fam](size="b", nc=3))
    net = model.net.train()
    crit = model.build_criterion()
    assert crit.box_loss == ("ciou" if fam == "yolo4" else "giou")
    assert crit.ignore_thresh == (0.6 if fam == "yolo2" else 0.5) and crit.balance == ((1.0,) if fam == "yolo2" else (4.0, 1.0, 0.4))
    assert crit.assign_thresh == (0.213 if fam == "yolo4" else None) and not hasattr(crit, "hyp")
    empty = {"batch_idx": torch.zeros(0, dtype=torch.long), "cls": torch.zeros(0, dtype=torch.long), "bboxes": torch.zeros(0, 4)}
    x = torch.rand(2, 3, 64, 64)
    loss, items = crit(net(x), empty)
    assert items[0] == 0 and items[2] == 0 and items[1] > 0 and not items.requires_grad
    loss.backward()
    opt = torch.optim.SGD(net.parameters(), lr=0.01, momentum=0.9)
    losses = []
    for _ in range(6):
        opt.zero_grad()
        loss, items = crit(net(x), _batch())
        loss.backward()
        opt.step()
        torch.testing.assert_close(loss.detach(), items.sum() * 2)
        losses.append(loss.item())
    assert all(math.isfinite(v) for v in losses)
    assert losses[-1] < 0.8 * losses[0], losses


# --------------------------------------------------------------------------- Darknet .weights


@pytest.mark.parametrize("fam", list(BUILDERS))
def test_darknet_weights_file_loads_through_libreyolo(fam: str, tmp_path: Path) -> None:
    """A fabricated ``.weights`` file (header + flat values in cfg order) loads with
    ``LibreYOLO(path)``: family and class count recognised, outputs bit-equal."""
    from libreyolo import LibreYOLO

    torch.manual_seed(2)
    net = BUILDERS[fam](nc=5)
    randomise_norm_stats(net, seed=1)
    net.eval()
    path = write_weights(net, tmp_path / f"{fam}.weights", seen=12345)
    assert path.stat().st_size == 20 + 4 * float_count(net)
    model = LibreYOLO(str(path))
    assert model.family.FAMILY == fam and model.nc == 5
    x = torch.rand(1, 3, 64, 64)
    with torch.no_grad():
        for a, b in zip(net(x), model.net.eval()(x), strict=True):
            assert torch.equal(a, b)


def test_darknet_file_layout_is_the_cfg_one(tmp_path: Path) -> None:
    """The first values are the stem's BatchNorm beta, gamma, mean, var, then its kernel."""
    from libreyolo.models._darknet.convert import read_weights

    torch.manual_seed(3)
    net = v3.build_yolo3(nc=1)
    randomise_norm_stats(net, seed=2)
    header, flat = read_weights(write_weights(net, tmp_path / "a.weights", seen=7))
    assert header == (0, 2, 0, 7)
    bn, conv = net.backbone.stem.bn, net.backbone.stem.conv
    want = torch.cat((bn.bias, bn.weight, bn.running_mean, bn.running_var, conv.weight.flatten())).detach()
    assert np.array_equal(flat[:want.numel()], want.numpy())
    last = net.head.m[0]  # the stride-8 output conv is the last layer: bias, then kernel
    tail = torch.cat((last.bias, last.weight.flatten())).detach()
    assert np.array_equal(flat[-tail.numel():], tail.numpy())


def test_truncated_darknet_file_is_refused(tmp_path: Path) -> None:
    from libreyolo import LibreYOLO

    torch.manual_seed(4)
    net = v3.build_yolo3(nc=2)
    p = write_weights(net, tmp_path / "t.weights")
    data = p.read_bytes()
    p.write_bytes(data[:-4 * 1000])  # whole floats missing: no layout fits
    with pytest.raises(CheckpointError, match="matches no"):
        LibreYOLO(str(p))


# --------------------------------------------------------------------------- user path


def test_predict_and_captured_decode_path() -> None:
    from libreyolo import SAMPLE_IMAGE, LibreYOLO

    model = LibreYOLO("LibreYOLO3b.pt", pretrained=False, nc=3)
    assert isinstance(model.family, YOLO3) and model.family.imgsz == 416
    res = model.predict(SAMPLE_IMAGE, imgsz=96, conf=0.0, max_det=5, device="cpu")
    h, w = res[0].orig_shape
    xyxy = torch.as_tensor(res[0].boxes.xyxy)
    assert xyxy.shape == (5, 4) and (xyxy[:, :2] >= 0).all() and (xyxy[:, 2] <= w).all() and (xyxy[:, 3] <= h).all()
    x = torch.rand(1, 3, 64, 64)
    cands = model.family.eager_forward(x, decoded=True)  # network + decode: what a graph would hold
    assert cands.shape == (1, 3 * (64 + 16 + 4), 6)  # fewer anchors than DECODE_TOPK at 64 px: all of them
    raw = model.family.eager_forward(x)
    torch.testing.assert_close(cands, decode(raw, net=model.net, k=1000))


@pytest.mark.parametrize("fam,size", [("yolo2", "b"), ("yolo3", "b"), ("yolo4", "tiny")])
def test_train_val_on_shapes_and_reload(fam: str, size: str, tmp_path: Path) -> None:
    from libreyolo import LibreYOLO
    from libreyolo.data.shapes import ensure_shapes_dataset

    data = ensure_shapes_dataset(tmp_path / "shapes", n_train=4, n_val=2, imgsz=64)
    model = Model(FAMS[fam](size=size, nc=80))  # the dataset has fewer classes: the head is rebuilt
    result = model.train(data=str(data), imgsz=64, batch=2, workers=0, device="cpu", nbs=2, mosaic=0.0,
                         close_mosaic=0, warmup_epochs=0, optimizer="SGD", lr0=0.001, verbose=False,
                         tensorboard=False, project=str(tmp_path / "runs"), seed=0, epochs=1)
    with open(f"{result['save_dir']}/results.csv", newline="") as f:
        rows = list(csv.DictReader(f))
    assert len(rows) == 1 and {"train/box_loss", "train/obj_loss", "train/cls_loss"} <= set(rows[0])
    assert all(float(rows[0][k]) >= 0 for k in ("train/box_loss", "train/obj_loss", "train/cls_loss"))
    loaded = LibreYOLO(result["best"])
    assert loaded.family.FAMILY == fam and loaded.size == size and loaded.nc == model.nc == 6
    metrics = loaded.val(data=str(data), imgsz=64, batch=2, workers=0, device="cpu", verbose=False)
    assert 0.0 <= float(metrics["mAP50-95"]) <= 1.0


# --------------------------------------------------------------------------- reference


def test_ultralytics_yolov3u_backbone_is_not_darknet53(nets80: dict[str, nn.Module]) -> None:
    """Why no Ultralytics weights convert (README "Fidelity"): its ``yolov3.yaml`` (YOLOv3u) has
    Darknet-53's stage widths, depths and strides, but its residual unit is two 3x3 convs with
    SiLU (Darknet-53: 1x1 then 3x3, LeakyReLU), so no tensor of a residual unit's first conv fits
    ours; every stage output has our shape."""
    pytest.importorskip("ultralytics")
    from ultralytics.nn.tasks import DetectionModel

    ref = DetectionModel("yolov3.yaml", nc=80, verbose=False).eval()
    layers = ref.model
    res = layers[2]  # the first residual unit (Bottleneck 64)
    assert tuple(res.cv1.conv.weight.shape) == (32, 64, 3, 3)
    ours = nets80["yolo3"].backbone.stages[0].blocks[0]
    assert tuple(ours.cv1.conv.weight.shape) == (32, 64, 1, 1)
    assert isinstance(res.cv1.act, nn.SiLU) and isinstance(ours.cv1.act, nn.LeakyReLU)
    x = torch.rand(1, 3, 64, 64)
    outs, y = {}, x
    with torch.no_grad():
        for i in range(11):
            y = layers[i](y)
            outs[i] = y
        mine = nets80["yolo3"].backbone(x)
    assert [tuple(outs[i].shape) for i in (6, 8, 10)] == [tuple(t.shape) for t in mine]
    assert [sum(1 for m in layers[i].modules() if m.__class__.__name__ == "Bottleneck") for i in (2, 4, 6, 8, 10)] \
        == [len(s.blocks) for s in nets80["yolo3"].backbone.stages]


# --------------------------------------------------------------------------- the reference cfg files

CFG_NAMES = {"yolo2": "yolov2.cfg", "yolo3": "yolov3.cfg", "yolo4": "yolov4.cfg", "yolo3-spp": "yolov3-spp.cfg",
             "yolo3-tiny": "yolov3-tiny.cfg", "yolo4-tiny": "yolov4-tiny.cfg"}
# sha256 (first 16 hex digits) of ``repr(cfg_layout(text))`` of the reference files: pjreddie/darknet
# f6afaab cfg/yolov2.cfg, cfg/yolov3.cfg, cfg/yolov3-spp.cfg, AlexeyAB/darknet 59596d7 cfg/yolov4.cfg
CFG_DIGESTS = {"yolo2": "a40eb210ffd6db61", "yolo3": "022d9acd4fb16ea2", "yolo4": "5830965e60deb9c2",
               "yolo3-spp": "07ce2dcc5b491838", "yolo3-tiny": "0cad84a02cdbe411", "yolo4-tiny": "5f6e39a9bbbf9c1b"}


def cfg_layout(text: str) -> list[tuple[int, int, int, int, bool, str]]:
    """Per ``[convolutional]`` section of a Darknet cfg, in order: (filters, input channels,
    size, stride, batch_normalize, activation), following channels through ``[route]``,
    ``[shortcut]``, ``[upsample]``, ``[maxpool]``, ``[reorg]`` (x4), grouped routes and the heads."""
    sections: list[dict[str, str]] = []
    for raw in text.splitlines():
        line = raw.split("#")[0].strip()
        if line.startswith("["):
            sections.append({"type": line[1:-1]})
        elif line:
            k, v = line.split("=", 1)
            sections[-1][k.strip()] = v.strip()
    channels, out, c = [], [], 3
    for i, sec in enumerate(sections[1:]):  # [net] first
        kind = sec["type"]
        if kind == "convolutional":
            f = int(sec["filters"])
            out.append((f, c, int(sec["size"]), int(sec.get("stride", 1)), sec.get("batch_normalize") == "1",
                        sec.get("activation", "logistic")))
            c = f
        elif kind == "route":
            c = sum(channels[j if j >= 0 else i + j] for j in (int(v) for v in sec["layers"].split(",")))
            c //= int(sec.get("groups", 1))  # groups=2 group_id=1: one channel half
        elif kind == "reorg":
            c *= 4
        channels.append(c)
    return out


def net_layout(net: nn.Module) -> list[tuple[int, int, int, int, bool, str]]:
    """The same rows for our network, from ``darknet_order()`` (what the ``.weights`` reader uses)."""
    acts = {id(m.conv): {nn.LeakyReLU: "leaky", nn.Mish: "mish"}[type(m.act)]
            for m in net.modules() if isinstance(m, ConvBNAct)}
    return [(int(c.out_channels), int(c.in_channels), int(c.kernel_size[0]), int(c.stride[0]), bn is not None,
             acts.get(id(c), "linear")) for c, bn in darknet_convs(net.darknet_order())]


@pytest.mark.parametrize("fam", list(BUILDERS))
def test_layer_layout_equals_the_reference_cfg(nets80: dict[str, nn.Module], fam: str) -> None:
    """Every conv (order, filters, input channels, size, stride, BatchNorm, activation) is the
    reference cfg's, so a released ``.weights`` file lands on the right tensors; the digest pins
    the reference files' rows (computed from them with :func:`cfg_layout`)."""
    rows = net_layout(nets80[fam])
    assert hashlib.sha256(repr(rows).encode()).hexdigest()[:16] == CFG_DIGESTS[fam]
    folder = os.environ.get("LIBREYOLO_DARKNET_CFG_DIR")  # a folder with the reference cfg files, if at hand
    if folder and (Path(folder) / CFG_NAMES[fam]).is_file():
        assert cfg_layout((Path(folder) / CFG_NAMES[fam]).read_text()) == rows


def test_cfg_layout_follows_routes_and_reorg() -> None:
    text = """[net]
[convolutional]
batch_normalize=1
filters=8
size=3
stride=2
activation=leaky
[convolutional]
filters=4
size=1
activation=mish
[reorg]
stride=2
[route]
layers=-1,-3
[convolutional]
filters=2
size=1
activation=linear
"""
    assert cfg_layout(text) == [(8, 3, 3, 2, True, "leaky"), (4, 8, 1, 1, False, "mish"), (2, 16 + 8, 1, 1, False, "linear")]



# --------------------------------------------------------------------------- the tiny sizes

TINY = {"yolo3": (8_852_366, 13), "yolo4": (6_056_606, 21)}  # unfused parameters at 80 classes, cfg convs


@pytest.mark.parametrize("fam", list(TINY))
def test_tiny_sizes_count_layout_and_levels(fam: str) -> None:
    """YOLOv3-tiny (published 8.9 M) and YOLOv4-tiny (6.1 M): two levels (strides 16, 32), the
    layout of yolov3-tiny.cfg / yolov4-tiny.cfg, and per-size output names."""
    torch.manual_seed(0)
    net = BUILDERS[fam](size="tiny", nc=80).eval()
    count, convs = TINY[fam]
    paper = (v3.PAPER_PARAMS_M if fam == "yolo3" else v4.PAPER_PARAMS_M)["tiny"] * 1e6
    assert _n(net) == count and abs(count - paper) / paper < 0.03
    rows = net_layout(net)
    assert len(rows) == convs
    assert hashlib.sha256(repr(rows).encode()).hexdigest()[:16] == CFG_DIGESTS[f"{fam}-tiny"]
    folder = os.environ.get("LIBREYOLO_DARKNET_CFG_DIR")
    if folder and (Path(folder) / CFG_NAMES[f"{fam}-tiny"]).is_file():
        assert cfg_layout((Path(folder) / CFG_NAMES[f"{fam}-tiny"]).read_text()) == rows
    with torch.no_grad():
        out = net(torch.rand(2, 3, 64, 96))
    assert [tuple(o.shape) for o in out] == [(2, 255, 4, 6), (2, 255, 2, 3)]
    model = FAMS[fam](size="tiny", nc=80)
    assert model.OUTPUT_NAMES == FAMS[fam].OUTPUT_NAMES == ("raw_p4", "raw_p5")  # tiny is the first size
    assert FAMS[fam](size="b", nc=1).OUTPUT_NAMES == ("raw_p3", "raw_p4", "raw_p5") and FAMS[fam].SIZES[0] == "tiny"
    assert model.imgsz == 416 and parse_weights_name(f"Libre{FAMS[fam].NAME_TOKEN}tiny.pt").size == "tiny"
    if fam == "yolo4":
        assert net.head.scale_xy == (1.05, 1.05)
        torch.testing.assert_close(net.head.anchors[0, 2], net.head.anchors[1, 0])  # mask 1,2,3 and 3,4,5


def test_stride1_pool_and_tiny_csp_block() -> None:
    """Darknet's size-2 stride-1 max-pool looks right and down (the border repeats); the tiny CSP
    block works on the second channel half and returns cat(x, t) with t = 1x1(cat(b, a))."""
    x = torch.tensor([[[[1.0, 5.0, 2.0], [0.0, 3.0, 9.0], [4.0, 1.0, 0.0]]]])
    want = torch.tensor([[[[5.0, 9.0, 9.0], [4.0, 9.0, 9.0], [4.0, 1.0, 0.0]]]])
    assert torch.equal(PoolStride1()(x), want)
    m = TinyCSPBlock(4, 8).eval()
    seen: dict[str, Tensor] = {}
    m.a.register_forward_hook(lambda mod, inp, out: seen.update(a_in=inp[0], a=out))
    m.b.register_forward_hook(lambda mod, inp, out: seen.__setitem__("b", out))
    m.t.register_forward_hook(lambda mod, inp, out: seen.update(t_in=inp[0], t=out))
    m.conv.register_forward_hook(lambda mod, inp, out: seen.__setitem__("x", out))
    with torch.no_grad():
        out, t = m(torch.rand(1, 4, 6, 6))
    assert torch.equal(seen["a_in"], seen["x"][:, 4:])
    assert torch.equal(seen["t_in"], torch.cat((seen["b"], seen["a"]), 1))
    assert torch.equal(out, torch.cat((seen["x"], t), 1)) and torch.equal(t, seen["t"])


@pytest.mark.parametrize("fam", list(TINY))
def test_tiny_darknet_file_loads_as_tiny(fam: str, tmp_path: Path) -> None:
    from libreyolo import LibreYOLO

    torch.manual_seed(7)
    net = BUILDERS[fam](size="tiny", nc=3)
    randomise_norm_stats(net, seed=4)
    net.eval()
    model = LibreYOLO(str(write_weights(net, tmp_path / f"{fam}-tiny.weights")))
    assert (model.family.FAMILY, model.size, model.nc) == (fam, "tiny", 3)
    x = torch.rand(1, 3, 64, 64)
    with torch.no_grad():
        for a, b in zip(net(x), model.net.eval()(x), strict=True):
            assert torch.equal(a, b)


def test_tiny_exports_two_named_levels_and_trains(tmp_path: Path) -> None:
    """The two-level export (names raw_p4, raw_p5) matches PyTorch in ONNX Runtime; the tiny
    model trains and validates on the shapes demo data."""
    pytest.importorskip("onnxruntime")
    import onnx

    from libreyolo import LibreYOLO
    from libreyolo.data.shapes import ensure_shapes_dataset

    torch.manual_seed(0)
    model = Model(YOLO4(size="tiny", nc=3))
    path = model.export(format="onnx", imgsz=64, file=str(tmp_path / "t.onnx"))
    assert [o.name for o in onnx.load(str(path)).graph.output] == ["raw_p4", "raw_p5"]
    loaded = LibreYOLO(str(path))
    x = torch.rand(1, 3, 64, 64)
    model.fuse()
    ref = model.eager_forward(x)
    for a, b in zip(ref, loaded.forward(x), strict=True):
        assert torch.allclose(a, b, rtol=1e-3, atol=1e-3)
    data = ensure_shapes_dataset(tmp_path / "shapes", n_train=4, n_val=2, imgsz=64)
    fresh = Model(YOLO3(size="tiny", nc=80))
    result = fresh.train(data=str(data), imgsz=64, batch=2, workers=0, device="cpu", nbs=2, mosaic=0.0,
                         close_mosaic=0, warmup_epochs=0, optimizer="SGD", lr0=0.001, verbose=False,
                         tensorboard=False, project=str(tmp_path / "runs"), seed=0, epochs=1)
    trained = LibreYOLO(result["best"])
    assert (trained.size, trained.nc) == ("tiny", 6)
    assert 0.0 <= float(trained.val(data=str(data), imgsz=64, batch=2, workers=0, device="cpu", verbose=False)["mAP50-95"]) <= 1.0
