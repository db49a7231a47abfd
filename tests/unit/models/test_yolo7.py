"""YOLOv7: network contract, parameter counts, fusing, postprocessing, OTA assignment, loss and
predict (CPU, tiny inputs)."""

from __future__ import annotations

import math

import numpy as np
import pytest
import torch
from _graph_replay import check_graph_replay_equals_eager
from torch import Tensor, nn

from libreyolo.errors import ConfigError
from libreyolo.graphs.parity import randomise_norm_stats
from libreyolo.layers.conv import RepConvN
from libreyolo.model import Model
from libreyolo.models.yolo7.elan7 import ELAN7, SPPCSPC, MPConv, SPPCSPTiny
from libreyolo.models.yolo7.family import YOLO7
from libreyolo.models.yolo7.loss import YOLO7Loss, find_candidates, ota_assign
from libreyolo.models.yolo7.nn import build_yolo7
from libreyolo.models.yolo7.postprocess import level_view, postprocess
from libreyolo.models.yolo7.variants import VARIANTS
from libreyolo.registry import parse_weights_name, register_family

SIZES = ("tiny", "b", "x")
TINY_ANCHORS = VARIANTS["tiny"].anchors


@pytest.fixture(autouse=True, scope="module")
def _one_thread():
    """One intra-op thread: these CPU tests are small, and the machine is shared."""
    n = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(n)


@pytest.fixture(scope="module")
def nets80() -> dict[str, nn.Module]:
    torch.manual_seed(0)
    return {s: build_yolo7(size=s, nc=80).eval() for s in SIZES}


def _n_params(net: nn.Module) -> int:
    return sum(p.numel() for p in net.parameters())


# --------------------------------------------------------------------------- network


@pytest.mark.parametrize("size", SIZES)
def test_param_count_matches_paper(size: str) -> None:
    """The paper's table (YOLOv7-tiny 6.2M, YOLOv7 36.9M, YOLOv7-X 71.3M) counts the deploy models: implicit
    layers folded, BatchNorm folded, RepConv merged, i.e. our fused count, compared within 3%.
    The trainable (unfused) count is larger only by BN affine terms and RepConv 1x1 branches."""
    torch.manual_seed(0)
    net = build_yolo7(size=size, nc=80)
    unfused = _n_params(net)
    net.fuse()
    fused = _n_params(net)
    paper = VARIANTS[size].paper_params_m * 1e6
    assert fused < unfused
    assert abs(fused - paper) / paper < 0.03, (size, fused, paper)
    assert abs(unfused - paper) / paper < 0.03, (size, unfused, paper)


@pytest.mark.parametrize("size", SIZES)
@pytest.mark.parametrize("mode", ["train", "eval"])
def test_outputs_per_level_in_train_and_eval(nets80: dict[str, nn.Module], size: str, mode: str) -> None:
    net = nets80[size]
    net.train(mode == "train")
    try:
        with torch.no_grad():
            out = net(torch.rand(2, 3, 64, 96))
    finally:
        net.eval()
    assert isinstance(out, list) and len(out) == 3
    for o, s in zip(out, (8, 16, 32), strict=True):
        assert o.shape == (2, 3 * 85, 64 // s, 96 // s)
        assert o.dtype == torch.float32 and torch.isfinite(o).all()


def test_architecture_blocks_per_size(nets80: dict[str, nn.Module]) -> None:
    tiny, base = nets80["tiny"], nets80["b"]
    assert isinstance(base.spp, SPPCSPC) and isinstance(tiny.spp, SPPCSPTiny)
    assert isinstance(base.down3, MPConv) and isinstance(tiny.down3, nn.MaxPool2d)
    assert all(isinstance(m, RepConvN) for m in base.head_convs)
    assert not any(isinstance(m, RepConvN) for m in tiny.modules())
    assert any(isinstance(m, nn.LeakyReLU) for m in tiny.modules())
    assert not any(isinstance(m, nn.LeakyReLU) for m in base.modules())
    xl = nets80["x"]
    assert len(xl.stage5.m) == 6 and not any(isinstance(m, RepConvN) for m in xl.modules())
    assert len(base.stage5.m) == 4 and len(tiny.stage5.m) == 2
    torch.testing.assert_close(base.head.anchors[0], torch.tensor([[12.0, 16], [19, 36], [40, 28]]))
    torch.testing.assert_close(tiny.head.anchors[2], torch.tensor([[116.0, 90], [156, 198], [373, 326]]))
    assert "head.anchors" in base.state_dict()


def test_elan7_concatenates_taps_in_reference_order() -> None:
    """Backbone ELAN (n=4, tap=2) concatenates c4, c2, b, a: with identity-like convs the
    output 1x1 conv sees exactly those tensors in that order."""
    m = ELAN7(4, 8, c_branch=2, c_mid=2, n=4, tap=2).eval()
    seen: list[Tensor] = []
    m.out.register_forward_hook(lambda mod, inp, out: seen.append(inp[0]))
    feats: dict[str, Tensor] = {}
    m.cv1.register_forward_hook(lambda mod, inp, out: feats.__setitem__("a", out))
    m.cv2.register_forward_hook(lambda mod, inp, out: feats.__setitem__("b", out))
    for i, c in enumerate(m.m):
        c.register_forward_hook(lambda mod, inp, out, i=i: feats.__setitem__(f"c{i + 1}", out))
    with torch.no_grad():
        m(torch.rand(1, 4, 6, 6))
    want = torch.cat((feats["c4"], feats["c2"], feats["b"], feats["a"]), 1)
    assert torch.equal(seen[0], want)
    assert MPConv(6, 5)(torch.rand(1, 6, 8, 8)).shape == (1, 10, 4, 4)


def test_bias_init_sets_objectness_and_class_priors() -> None:
    nc = 7
    net = build_yolo7(size="tiny", nc=nc).eval()
    for conv, s in zip(net.head.m, net.strides, strict=True):
        b = conv.bias.view(3, 5 + nc)
        torch.testing.assert_close(b[:, 4], torch.full((3,), math.log(8 / (640 / s) ** 2)))
        torch.testing.assert_close(b[:, 5:], torch.full((3, nc), math.log(0.6 / (nc - 0.99))))
    with torch.no_grad():
        out = net(torch.zeros(1, 3, 64, 64))
    # a fresh net is confident that every cell is background (training starts sane)
    assert max(level_view(o, 3)[..., 4].sigmoid().max().item() for o in out) < 0.05


@pytest.mark.parametrize("size", SIZES)
def test_fuse_equals_unfused(size: str) -> None:
    torch.manual_seed(1)
    net = build_yolo7(size=size, nc=5)
    randomise_norm_stats(net, seed=0)
    net.eval()
    x = torch.rand(2, 3, 64, 64)
    with torch.no_grad():
        ref = [o.clone() for o in net(x)]
        assert net.fuse() is net
        got = net(x)
    assert not any(isinstance(m, nn.BatchNorm2d) for m in net.modules())
    assert all(m.conv1 is None and m.conv is not None for m in net.modules() if isinstance(m, RepConvN))
    for r, g in zip(ref, got, strict=True):
        scale = r.abs().max().item()
        assert (r - g).abs().max().item() <= 1e-4 * max(1.0, scale)


def test_bad_size_and_nc_raise_config_error() -> None:
    with pytest.raises(ConfigError, match="no size"):
        build_yolo7(size="x9", nc=80)
    with pytest.raises(ConfigError, match="nc"):
        build_yolo7(size="tiny", nc=0)


# --------------------------------------------------------------------------- postprocess


class _Meta(nn.Module):
    """Just the attributes postprocess reads from the network."""

    def __init__(self, nc: int) -> None:
        super().__init__()
        self.nc, self.strides = nc, (8, 16, 32)
        self.head = nn.Module()
        self.head.register_buffer("anchors", torch.tensor(TINY_ANCHORS, dtype=torch.float32).view(3, 3, 2))


def _empty_raw(nc: int, b: int = 1, hw: tuple[int, int] = (64, 64)) -> list[Tensor]:
    """Raw outputs with every objectness and class logit very negative (nothing detected)."""
    raw = []
    for s in (8, 16, 32):
        t = torch.zeros(b, 3 * (5 + nc), hw[0] // s, hw[1] // s)
        level_view(t, 3)[..., 4:] = -20.0
        raw.append(t)
    return raw


def _put(raw: list[Tensor], *, b: int = 0, level: int, anchor: int, row: int, col: int,
         txywh: tuple[float, float, float, float] = (0.0, 0.0, 0.0, 0.0), obj: float = 5.0,
         cls: dict[int, float] | None = None) -> None:
    v = level_view(raw[level], 3)
    v[b, anchor, row, col, :4] = torch.tensor(txywh)
    v[b, anchor, row, col, 4] = obj
    for c, logit in (cls or {}).items():
        v[b, anchor, row, col, 5 + c] = logit


def _pp(raw: list[Tensor], nc: int, **kw: object) -> list[Tensor]:
    args = {"conf": 0.25, "iou": 0.65, "classes": None, "max_det": 300, "agnostic": False}
    args.update(kw)
    return postprocess(raw, net=_Meta(nc), **args)  # type: ignore[arg-type]


def test_single_confident_anchor_gives_expected_box() -> None:
    raw = _empty_raw(4)
    # zero box logits: centre of cell (3, 2), size = anchor 1 of stride 8 (16 x 30 px)
    _put(raw, level=0, anchor=1, row=2, col=3, obj=5.0, cls={2: 4.0})
    (det,) = _pp(raw, 4)
    assert det.shape == (1, 6) and det.dtype == torch.float32
    torch.testing.assert_close(det[0, :4], torch.tensor([20.0, 5.0, 36.0, 35.0]))
    torch.testing.assert_close(det[0, 4], torch.sigmoid(torch.tensor(5.0)) * torch.sigmoid(torch.tensor(4.0)))
    assert det[0, 5].item() == 2.0


def test_decode_uses_v7_offsets_stride_and_anchor_scaling() -> None:
    raw = _empty_raw(1)
    big = 30.0  # sigmoid -> 1: xy offset +1.5 cells, wh = 4 x anchor
    _put(raw, level=2, anchor=0, row=1, col=0, txywh=(big, -big, big, big), obj=6.0)
    (det,) = _pp(raw, 1)
    cx, cy = (1.5 + 0) * 32, (-0.5 + 1) * 32
    w, h = 4 * 116.0, 4 * 90.0
    torch.testing.assert_close(det[0, :4], torch.tensor([cx - w / 2, cy - h / 2, cx + w / 2, cy + h / 2]))
    # one class: the score is the objectness alone (no class logit is trained when nc == 1)
    torch.testing.assert_close(det[0, 4], torch.sigmoid(torch.tensor(6.0)))


def test_nms_conf_and_classes_filters() -> None:
    raw = _empty_raw(3)
    _put(raw, level=0, anchor=0, row=2, col=3, obj=6.0, cls={0: 6.0})
    _put(raw, level=0, anchor=0, row=3, col=3, txywh=(0.0, -30.0, 0.0, 0.0), obj=5.0, cls={0: 5.0})
    _put(raw, level=0, anchor=0, row=5, col=5, obj=4.0, cls={1: 4.0})
    _put(raw, level=0, anchor=2, row=5, col=5, obj=-1.0, cls={2: 4.0})  # score ~0.26 * 0.98
    (det,) = _pp(raw, 3)
    # the (3, 3) box decodes to the same box as (2, 3) moved by half a cell -> suppressed (IoU high)
    assert det[:, 5].tolist() == [0.0, 1.0, 2.0]
    (hi,) = _pp(raw, 3, conf=0.5)
    assert hi[:, 5].tolist() == [0.0, 1.0]
    (only2,) = _pp(raw, 3, classes=[2])
    assert only2[:, 5].tolist() == [2.0]
    (none,) = _pp(raw, 3, classes=[])
    assert none.shape == (0, 6)
    (top1,) = _pp(raw, 3, max_det=1)
    assert top1.shape[0] == 1 and top1[0, 5].item() == 0.0


def test_postprocess_rejects_mismatched_raw() -> None:
    raw = _empty_raw(3)
    with pytest.raises(ConfigError, match="different number of classes"):
        _pp(raw, 4)
    with pytest.raises(ConfigError, match="levels"):
        _pp(raw[:2], 3)


# --------------------------------------------------------------------------- assignment


def _tiny_anchors() -> Tensor:
    return torch.tensor(TINY_ANCHORS, dtype=torch.float32).view(3, 3, 2)


GRIDS = [(8, 8), (4, 4), (2, 2)]  # a 64 x 64 input


def _key(c) -> list[tuple[int, int, int, int]]:  # noqa: ANN001
    return sorted(zip(c.b.tolist(), c.a.tolist(), c.gj.tolist(), c.gi.tolist(), strict=True))


def test_candidates_anchor_ratio_and_neighbour_cells() -> None:
    """A 4 x 4 px box centred at grid (2.3, 5.6) of stride 8 matches only anchor 0 (10 x 13 px:
    ratios 2.5 and 3.25 < 4; anchor 1 is 4x wider -> rejected) and proposes its own cell
    (x 2, y 5), the left neighbour (x frac 0.3 < 0.5) and the lower one (y frac 0.6 > 0.5)."""
    t = torch.tensor([[0, 1, 2.3 / 8, 5.6 / 8, 0.5 / 8, 0.5 / 8]])
    c = find_candidates(t, grids=GRIDS, anchors=_tiny_anchors(), strides=(8, 16, 32))
    assert _key(c[0]) == [(0, 0, 5, 1), (0, 0, 5, 2), (0, 0, 6, 2)]
    assert c[1].b.numel() == 0 and c[2].b.numel() == 0
    # a second box proposing the same cells does not duplicate them
    t2 = torch.cat((t, torch.tensor([[0, 0, 2.4 / 8, 5.7 / 8, 0.6 / 8, 0.6 / 8]])))
    c2 = find_candidates(t2, grids=GRIDS, anchors=_tiny_anchors(), strides=(8, 16, 32))
    assert _key(c2[0]) == _key(c[0])


def _zero_preds(nc: int, b: int = 1) -> list[Tensor]:
    return [torch.zeros(b, 3, h, w, 5 + nc) for h, w in GRIDS]


def test_ota_dynamic_k_takes_the_best_candidate() -> None:
    """Zero logits decode to anchor-sized boxes at the cell centres. The 4 x 4 px box's IoUs
    with its three candidates are ~0.12, ~0.04, ~0.02, summing below 2, so k = 1 and it takes
    the candidate of its own cell, where the IoU is highest."""
    t = torch.tensor([[0, 1, 2.3 / 8, 5.6 / 8, 0.5 / 8, 0.5 / 8]])
    anchors = _tiny_anchors()
    cand = find_candidates(t, grids=GRIDS, anchors=anchors, strides=(8, 16, 32))
    out = ota_assign(_zero_preds(2), t, cand, anchors=anchors, strides=(8, 16, 32), img_hw=(64, 64))
    assert _key(out[0]) == [(0, 0, 5, 2)] and out[0].gt.tolist() == [0]
    assert out[1].b.numel() == 0 and out[2].b.numel() == 0


def test_ota_conflict_goes_to_the_cheaper_ground_truth() -> None:
    """Two boxes of different classes both rank the same cell first (same IoU, k = 1); the cell
    goes to the box whose class the prediction there favours (lower class cost), and the other
    box is left without a positive, as in the reference."""
    t = torch.tensor([[0, 0, 2.3 / 8, 5.6 / 8, 0.5 / 8, 0.5 / 8],
                      [0, 1, 2.35 / 8, 5.6 / 8, 0.5 / 8, 0.5 / 8]])
    anchors = _tiny_anchors()
    cand = find_candidates(t, grids=GRIDS, anchors=anchors, strides=(8, 16, 32))
    for favoured in (0, 1):
        preds = _zero_preds(2)
        preds[0][0, 0, 5, 2, 5 + favoured] = 1.0
        out = ota_assign(preds, t, cand, anchors=anchors, strides=(8, 16, 32), img_hw=(64, 64))
        assert _key(out[0]) == [(0, 0, 5, 2)]
        assert out[0].gt.tolist() == [favoured]


def test_ota_ignores_other_images_and_empty_batches() -> None:
    t = torch.tensor([[1, 1, 2.3 / 8, 5.6 / 8, 0.5 / 8, 0.5 / 8]])
    anchors = _tiny_anchors()
    cand = find_candidates(t, grids=GRIDS, anchors=anchors, strides=(8, 16, 32))
    out = ota_assign(_zero_preds(2, b=2), t, cand, anchors=anchors, strides=(8, 16, 32), img_hw=(64, 64))
    assert out[0].b.tolist() == [1]
    empty = torch.zeros(0, 6)
    cand = find_candidates(empty, grids=GRIDS, anchors=anchors, strides=(8, 16, 32))
    out = ota_assign(_zero_preds(2), empty, cand, anchors=anchors, strides=(8, 16, 32), img_hw=(64, 64))
    assert all(o.b.numel() == 0 for o in out)


# --------------------------------------------------------------------------- loss / training


def _batch() -> dict[str, Tensor]:
    return {
        "batch_idx": torch.tensor([0, 0, 1]),
        "cls": torch.tensor([0, 2, 1]),
        "bboxes": torch.tensor([[0.3, 0.4, 0.2, 0.3], [0.7, 0.6, 0.4, 0.5], [0.5, 0.5, 0.6, 0.4]]),
    }


def test_criterion_gains_follow_the_size_recipe() -> None:
    register_family(YOLO7)
    m = Model(YOLO7(size="tiny", nc=40))
    crit = m.build_criterion()
    assert crit.gains == {"box": 0.05, "obj": 1.0, "cls": 0.5}
    assert not hasattr(crit, "hyp")  # the trainer would overwrite it with YOLOv9-recipe gains
    # the class gain is scaled by nc / 80 (as the reference trainer does)
    torch.manual_seed(7)
    preds = [p.detach() for p in m.net.train()(torch.rand(1, 3, 64, 64))]
    batch = {"batch_idx": torch.tensor([0]), "cls": torch.tensor([3]),
             "bboxes": torch.tensor([[0.5, 0.5, 0.3, 0.3]])}
    _, items = crit(preds, batch)
    crit.gains["cls"] = 1.0
    _, items1 = crit(preds, batch)
    torch.testing.assert_close(items1[2] * 0.5, items[2])
    assert items[2] > 0
    assert VARIANTS["b"].obj == 0.7 and VARIANTS["b"].cls == 0.3 and VARIANTS["b"].box == 0.05
    assert YOLO7.LOSS_NAMES == ("box", "obj", "cls")


def test_loss_without_boxes_is_objectness_only_and_backpropagates() -> None:
    torch.manual_seed(3)
    net = build_yolo7(size="tiny", nc=3).train()
    empty = {"batch_idx": torch.zeros(0, dtype=torch.long), "cls": torch.zeros(0, dtype=torch.long),
             "bboxes": torch.zeros(0, 4)}
    preds = net(torch.rand(2, 3, 64, 96))
    loss, items = YOLO7Loss(net, obj=0.7)(preds, empty)
    assert items.shape == (3,) and not items.requires_grad
    assert items[0] == 0 and items[2] == 0 and items[1] > 0
    # objectness only: gain 0.7 scaled by the input area, levels weighted 4.0 / 1.0 / 0.4
    bce = [nn.functional.binary_cross_entropy_with_logits(level_view(p, 3)[..., 4],
                                                         torch.zeros_like(level_view(p, 3)[..., 4]))
           for p in preds]
    want = 0.7 * (64 * 96 / 640**2) * (4.0 * bce[0] + 1.0 * bce[1] + 0.4 * bce[2])
    torch.testing.assert_close(items[1], want.detach())
    torch.testing.assert_close(loss.detach(), want.detach() * 2)
    loss.backward()
    assert net.head.m[0].bias.grad is not None and torch.isfinite(net.head.m[0].bias.grad).all()


def test_loss_is_multiplied_by_batch_size_and_finite() -> None:
    torch.manual_seed(4)
    net = build_yolo7(size="tiny", nc=3).train()
    loss, items = YOLO7Loss(net)(net(torch.rand(2, 3, 64, 64)), _batch())
    assert torch.isfinite(loss) and (items > 0).all()
    torch.testing.assert_close(loss.detach(), items.sum() * 2)


def test_repeated_batch_training_decreases_loss() -> None:
    """Small (about 8 px) boxes have level-0 candidates only, so the per-level box mean does not
    jump when positives move between levels; 40 SGD steps on one batch cut the loss clearly. The
    single-step losses wander (their path changes with the CPU's thread count), so the means of
    the first 4 and the last 8 steps are compared."""
    torch.manual_seed(0)
    net = build_yolo7(size="tiny", nc=3).train()
    crit = YOLO7Loss(net, **{k: getattr(VARIANTS["tiny"], k) for k in ("box", "obj", "cls")})
    opt = torch.optim.SGD(net.parameters(), lr=0.02, momentum=0.9)
    x = torch.rand(2, 3, 64, 64)
    batch = {"batch_idx": torch.tensor([0, 0, 1]), "cls": torch.tensor([0, 2, 1]),
             "bboxes": torch.tensor([[0.3, 0.3, 0.14, 0.12], [0.7, 0.6, 0.12, 0.14], [0.5, 0.45, 0.13, 0.13]])}
    losses = []
    for _ in range(40):
        loss, _ = crit(net(x), batch)
        opt.zero_grad()
        loss.backward()
        opt.step()
        losses.append(loss.item())
    assert all(math.isfinite(v) for v in losses)
    assert sum(losses[-8:]) / 8 < 0.8 * sum(losses[:4]) / 4, losses


# --------------------------------------------------------------------------- family / predict


def test_weights_names_resolve_without_clashing() -> None:
    register_family(YOLO7)
    register_family(YOLO7)  # idempotent
    for size in SIZES:
        p = parse_weights_name(f"LibreYOLO7{size}.pt")
        assert (p.family, p.size, p.task) == ("yolo7", size, "detect")
    assert parse_weights_name("LibreYOLO9t.pt").family == "yolo9"
    with pytest.raises(ConfigError):
        parse_weights_name("LibreYOLO7q.pt")
    try:  # with the YOLOX family registered too, "X" sizes stay unambiguous
        from libreyolo.models.yolox.family import YOLOX
    except ImportError:
        return
    register_family(YOLOX)
    assert parse_weights_name("LibreYOLO7x.pt").family == "yolo7"
    assert parse_weights_name("LibreYOLOXx.pt").family == "yolox"


def test_predict_on_sample_image_untrained() -> None:
    register_family(YOLO7)
    from libreyolo import SAMPLE_IMAGE, LibreYOLO

    model = LibreYOLO("LibreYOLO7tiny.pt", pretrained=False, nc=3)
    assert isinstance(model.family, YOLO7) and model.size == "tiny" and model.nc == 3
    res = model.predict(SAMPLE_IMAGE, imgsz=160, conf=0.0, max_det=5, device="cpu")
    assert len(res) == 1
    h, w = res[0].orig_shape
    xyxy = torch.as_tensor(res[0].boxes.xyxy)
    assert xyxy.shape == (5, 4)
    assert (xyxy[:, :2] >= 0).all() and (xyxy[:, 2] <= w).all() and (xyxy[:, 3] <= h).all()
    assert set(torch.as_tensor(res[0].boxes.cls).tolist()) <= {0.0, 1.0, 2.0}
    fused = model.fuse()
    again = fused.predict(np.zeros((90, 120, 3), np.uint8), imgsz=64, conf=0.0, max_det=3, device="cpu")
    assert torch.as_tensor(again[0].boxes.xyxy).shape == (3, 4)


# --------------------------------------------------------------------------- CUDA


@pytest.mark.cuda
@pytest.mark.parametrize("size", SIZES)
@pytest.mark.parametrize("fused", [False, True])
def test_cuda_graph_replay_is_bitwise_equal_to_eager(size: str, fused: bool) -> None:
    """The forward captures (no host syncs, static shapes) and replays bit-identically on two
    inputs from different distributions."""
    torch.manual_seed(6)
    net = build_yolo7(size=size, nc=80).cuda().eval()
    if fused:
        net.fuse()
    check_graph_replay_equals_eager(net)
