"""YOLOv1 (family yolo1): parameter counts of the paper's network and the Darknet cfgs, layer
layout = the cfgs, Darknet's [local] layer, the decode, the paper's loss, the fixed input size,
Darknet .weights, and the user path (predict, train on shapes, val, reload, ONNX Runtime).

The published networks are counted on the ``meta`` device (no 1 GB allocation); everything that
runs uses the test-only width (``width``, ``hidden``, ``input_size``: nn.py's docstring)."""

from __future__ import annotations

import numpy as np
import pytest
import torch

from libreyolo.errors import ConfigError
from libreyolo.graphs.parity import randomise_norm_stats
from libreyolo.models._darknet.blocks import darknet_convs
from libreyolo.models._darknet.local import LocallyConnected2d
from libreyolo.models.yolo1 import nn as v1
from libreyolo.models.yolo1.family import YOLO1
from libreyolo.models.yolo1.loss import YOLO1Loss, assign_cells, responsible
from libreyolo.models.yolo1.postprocess import decode, postprocess, split
from libreyolo.registry import parse_weights_name, register_family

SMALL = {"width": 1 / 16, "hidden": 32, "input_size": 64}  # the test-only width


@pytest.fixture(autouse=True, scope="module")
def _one_thread():
    n = torch.get_num_threads()
    torch.set_num_threads(1)
    register_family(YOLO1)
    yield
    torch.set_num_threads(n)


def _meta(size: str, nc: int = 20) -> torch.nn.Module:
    with torch.device("meta"):
        return v1.build_yolo1(size=size, nc=nc)


def _n(net: torch.nn.Module) -> int:
    return sum(p.numel() for p in net.parameters())


def _small(size: str, nc: int = 3) -> v1.YOLO1Net:
    return v1.build_yolo1(size=size, nc=nc, **SMALL)


# --------------------------------------------------------------------------- network


def _expected_count(size: str, *, fused: bool) -> int:
    """The count computed from the paper / cfg text (20 classes), independently of nn.py."""
    rows = {"b": [(7, 64), (3, 192), (1, 128), (3, 256), (1, 256), (3, 512)] + [(1, 256), (3, 512)] * 4
            + [(1, 512), (3, 1024)] + [(1, 512), (3, 1024)] * 2 + [(3, 1024)] * 4,
            "tiny": [(3, 16), (3, 32), (3, 64), (3, 128), (3, 256), (3, 512), (3, 1024), (3, 256)]}
    convs = rows["tiny" if size == "tiny" else "b"]
    c, n = 3, 0
    for k, co in convs:
        n += k * k * c * co + (1 if fused else 2) * co  # fused: conv bias; unfused: BatchNorm gamma, beta
        c = co
    if size == "b":  # 7*7*1024 -> 4096 -> 7*7*30
        return n + (49 * 1024 + 1) * 4096 + (4096 + 1) * 1470
    if size == "darknet":  # [local] 3x3 256 at 7x7 (weights and biases per location), [connected] 1715
        return n + 49 * 256 * 9 * 1024 + 49 * 256 + (49 * 256 + 1) * 1715
    return n + (49 * 256 + 1) * 1470  # tiny: [connected] 1470


@pytest.mark.parametrize("size", v1.SIZES)
def test_param_counts_unfused_and_fused(size: str) -> None:
    net = _meta(size)
    assert _n(net) == v1.PARAMS_20[size] == _expected_count(size, fused=False)
    net.fuse()
    assert _n(net) == v1.PARAMS_20_FUSED[size] == _expected_count(size, fused=True)
    assert net.fc2.out_features == {"b": 1470, "darknet": 1715, "tiny": 1470}[size]
    if size == "b":  # the paper's "about 272 M"; its first FC alone 205.5 M
        assert abs(v1.PARAMS_20_FUSED["b"] / 1e6 - v1.PAPER_PARAMS_M["b"]) / v1.PAPER_PARAMS_M["b"] < 0.03
        assert _n(net.fc1) == 205_524_992


# yolov1.cfg / yolov1-tiny.cfg (pjreddie/darknet), [convolutional] rows: size, filters, stride
CFG_ROWS = {
    "darknet": [(7, 64, 2), (3, 192, 1), (1, 128, 1), (3, 256, 1), (1, 256, 1), (3, 512, 1)]
    + [(1, 256, 1), (3, 512, 1)] * 4 + [(1, 512, 1), (3, 1024, 1)] + [(1, 512, 1), (3, 1024, 1)] * 2
    + [(3, 1024, 1), (3, 1024, 2), (3, 1024, 1), (3, 1024, 1)],
    "tiny": [(3, 16, 1), (3, 32, 1), (3, 64, 1), (3, 128, 1), (3, 256, 1), (3, 512, 1), (3, 1024, 1), (3, 256, 1)],
}
CFG_ROWS["b"] = CFG_ROWS["darknet"]  # the paper's Figure 3 has the same 24 convs
MAXPOOL_AFTER = {"darknet": {1, 2, 6, 16}, "tiny": {1, 2, 3, 4, 5, 6}}  # 1-based conv index followed by a max-pool
MAXPOOL_AFTER["b"] = MAXPOOL_AFTER["darknet"]


@pytest.mark.parametrize("size", v1.SIZES)
def test_layer_layout_equals_the_cfg(size: str) -> None:
    net = _meta(size)
    pairs = darknet_convs(net.darknet_order())
    convs = [(c, b) for c, b in pairs if isinstance(c, torch.nn.Conv2d)]
    assert [(c.kernel_size[0], c.out_channels, c.stride[0]) for c, _ in convs] == CFG_ROWS[size]
    assert all(b is not None and b.eps == 1e-5 for _, b in convs)  # batch_normalize=1
    assert all(c.padding[0] == c.kernel_size[0] // 2 for c, _ in convs)  # Darknet pad=1: size / 2
    seq = list(net.conv.layers)
    after = {i for i, m in enumerate(seq) if isinstance(m, torch.nn.MaxPool2d)}
    conv_idx = [i for i, m in enumerate(seq) if not isinstance(m, torch.nn.MaxPool2d)]
    assert {conv_idx.index(i - 1) + 1 for i in after} == MAXPOOL_AFTER[size]
    tail = [type(c).__name__ for c, _ in pairs[len(convs):]]
    assert tail == {"b": ["Linear", "Linear"], "darknet": ["LocallyConnected2d", "Linear"], "tiny": ["Linear"]}[size]
    assert isinstance(net.pool, torch.nn.Identity)  # 448 / 64 = 7: no pooling at the published sizes


@pytest.mark.parametrize("size", v1.SIZES)
@pytest.mark.parametrize("mode", ["train", "eval"])
def test_small_variant_output_and_grid(size: str, mode: str) -> None:
    torch.manual_seed(0)
    net = _small(size, nc=3)
    getattr(net, mode)()
    out = net(torch.rand(2, 3, 64, 64))
    assert out.shape == (2, 49 * (3 + 5 * v1.BOXES[size])) and torch.isfinite(out).all()
    assert net.conv(torch.zeros(1, 3, 64, 64)).shape[-1] == 8  # three downsamplings run, then a 7x7 pool
    net.eval()
    a, b = net(torch.rand(1, 3, 64, 64)), net(torch.rand(1, 3, 64, 64))
    assert not torch.equal(a, b)  # untrained outputs depend on the input


def test_fuse_equals_unfused() -> None:
    torch.manual_seed(1)
    net = _small("darknet")
    randomise_norm_stats(net, seed=0)
    net.eval()
    x = torch.rand(2, 3, 64, 64)
    ref = net(x)
    net.fuse()
    torch.testing.assert_close(net(x), ref, rtol=1e-4, atol=1e-5)


def test_local_layer_is_darknets_forward() -> None:
    """LocallyConnected2d == forward_local_layer's literal arithmetic (im2col rows c, ky, kx;
    weight block j per output location; one bias per output element)."""
    torch.manual_seed(2)
    c, n, k, h, w = 3, 4, 3, 5, 6
    m = LocallyConnected2d(c, n, k, in_hw=(h, w), pad=1)
    with torch.no_grad():
        m.bias.normal_()
    x = torch.randn(2, c, h, w)
    wt, bias = m.weight.detach().flatten().numpy(), m.bias.detach().flatten().numpy()
    ref = np.zeros((2, n * h * w), np.float32)
    for b in range(2):
        xi = x[b].numpy()
        out = bias.copy()
        for j in range(h * w):
            oy, ox = divmod(j, w)
            for f in range(n):
                acc = 0.0
                for r in range(c * k * k):
                    ch, ky, kx = r // (k * k), (r // k) % k, r % k
                    iy, ix = oy + ky - 1, ox + kx - 1
                    v = xi[ch, iy, ix] if 0 <= iy < h and 0 <= ix < w else 0.0
                    acc += wt[j * n * c * k * k + f * c * k * k + r] * v
                out[f * h * w + j] += acc
        ref[b] = out
    torch.testing.assert_close(m(x).flatten(1), torch.from_numpy(ref), rtol=1e-5, atol=1e-5)


def test_bad_size_nc_and_options_raise() -> None:
    with pytest.raises(ConfigError, match="sizes"):
        v1.build_yolo1(size="x", nc=3)
    with pytest.raises(ConfigError, match="nc"):
        v1.build_yolo1(size="tiny", nc=0)
    with pytest.raises(ConfigError, match="input_size"):
        v1.build_yolo1(size="tiny", nc=3, input_size=640)


def test_weights_names_resolve() -> None:
    for size in v1.SIZES:
        p = parse_weights_name(f"LibreYOLO1{size}.pt")
        assert (p.family, p.size, p.task) == ("yolo1", size, "detect")


# --------------------------------------------------------------------------- decode


def _raw(S: int, B: int, nc: int, n: int = 1) -> torch.Tensor:
    return torch.zeros(n, S * S * (nc + 5 * B))


class _Net:
    S, B, nc, input_size = 7, 2, 3, 448


def test_decode_cell_offsets_square_root_sizes_and_class_specific_scores() -> None:
    raw = _raw(7, 2, 3)
    cls, conf, box = split(raw, S=7, B=2, nc=3)  # views into raw
    cell = 2 * 7 + 3  # row 2, col 3
    cls[0, cell] = torch.tensor([0.1, 0.8, 0.1])
    conf[0, cell] = torch.tensor([0.9, 0.2])
    box[0, cell, 0] = torch.tensor([0.5, 0.25, 0.5, 0.6])  # centre (3.5 / 7, 2.25 / 7); w = 0.25, h = 0.36
    dets = postprocess(raw, net=_Net(), conf=0.1, iou=0.5, classes=None, max_det=10, agnostic=False)[0]
    best = dets[0]
    cx, cy, bw, bh = 3.5 / 7 * 448, 2.25 / 7 * 448, 0.25 * 448, 0.36 * 448
    torch.testing.assert_close(best[:4], torch.tensor([cx - bw / 2, cy - bh / 2, cx + bw / 2, cy + bh / 2]))
    assert float(best[4]) == pytest.approx(0.9 * 0.8) and int(best[5]) == 1
    assert postprocess(raw, net=_Net(), conf=0.1, iou=0.5, classes=[0], max_det=10, agnostic=False)[0].shape[0] == 0


def test_captured_decode_equals_postprocess() -> None:
    torch.manual_seed(3)
    raw = torch.rand(2, 49 * 13) * 0.98 + 0.01  # inside (0, 1): no clamped ties
    cands = decode(raw, net=_Net(), k=1000)
    assert cands.shape == (2, 49 * 2 * 3, 6)  # every (box, class) pair: fewer than k
    assert (cands[:, :-1, 4] >= cands[:, 1:, 4]).all()
    from libreyolo.ops.candidates import select_detections

    got = select_detections(cands, conf=0.3, iou=0.5, max_det=50, agnostic=False)
    ref = postprocess(raw, net=_Net(), conf=0.3, iou=0.5, classes=None, max_det=50, agnostic=False)
    for a, b in zip(got, ref, strict=True):
        torch.testing.assert_close(a, b)


# --------------------------------------------------------------------------- loss


def test_assignment_one_object_per_cell_first_label_wins() -> None:
    t = torch.tensor([[0, 1, 0.50, 0.50, 0.2, 0.2], [0, 2, 0.52, 0.55, 0.1, 0.1], [1, 0, 0.5, 0.5, 0.3, 0.3]])
    b, cell, row = assign_cells(t, S=7)
    assert sorted(zip(b.tolist(), cell.tolist(), row.tolist(), strict=True)) == [(0, 24, 0), (1, 24, 2)]


def test_responsible_box_by_iou_then_rmse() -> None:
    truth = torch.tensor([[0.4, 0.4, 0.6, 0.6]])
    txywh = torch.tensor([[0.5, 0.5, 0.2, 0.2]])
    pred = torch.tensor([[[0.0, 0.0, 0.1, 0.1], [0.45, 0.45, 0.6, 0.6]]])
    pxywh = torch.tensor([[[0.05, 0.05, 0.1, 0.1], [0.525, 0.525, 0.15, 0.15]]])
    pick, iou = responsible(pred, pxywh, truth, txywh)
    assert int(pick) == 1 and float(iou) == pytest.approx(0.0225 / 0.04, rel=1e-5)
    far = torch.tensor([[[0.0, 0.0, 0.1, 0.1], [0.9, 0.9, 1.0, 1.0]]])
    fxywh = torch.tensor([[[0.05, 0.05, 0.1, 0.1], [0.95, 0.95, 0.1, 0.1]]])
    pick, iou = responsible(far, fxywh, truth, txywh)  # no overlap: the smaller RMSE (box 0: 0.45 * sqrt 2 + ...)
    assert int(pick) == 0 and float(iou) == 0.0


def test_loss_terms_by_hand() -> None:
    """One object, a perfect responsible box: coord 0, obj (1 - 1)^2 = 0 with confidence 1, noobj
    0.5 * (sum of the other confidences squared), cls = sum of squared class errors."""
    net = _Net()
    raw = _raw(7, 2, 3)
    cls, conf, box = split(raw, S=7, B=2, nc=3)
    cell = 3 * 7 + 3
    box[0, cell, 1] = torch.tensor([0.5, 0.5, 0.4, 0.5])  # centre of cell (3, 3), w 0.16, h 0.25
    conf[0, cell] = torch.tensor([0.3, 1.0])
    conf[0, 0] = torch.tensor([0.2, 0.0])
    cls[0, cell] = torch.tensor([0.0, 0.5, 0.0])
    batch = {"batch_idx": torch.tensor([0]), "cls": torch.tensor([1.0]), "bboxes": torch.tensor([[0.5, 0.5, 0.16, 0.25]])}
    loss, items = YOLO1Loss(net)(raw, batch)
    coord, obj, noobj, c = items.tolist()
    assert coord == pytest.approx(0.0, abs=1e-10) and obj == pytest.approx(0.0, abs=1e-10)
    assert noobj == pytest.approx(0.5 * (0.3**2 + 0.2**2)) and c == pytest.approx(0.25)
    assert float(loss) == pytest.approx(sum(items.tolist()))


def test_loss_decreases_with_sgd() -> None:
    torch.manual_seed(4)
    net = _small("b", nc=3).train()
    crit = YOLO1Loss(net)
    batch = {"batch_idx": torch.tensor([0, 0, 1]), "cls": torch.tensor([0.0, 2.0, 1.0]),
             "bboxes": torch.tensor([[0.3, 0.3, 0.2, 0.3], [0.7, 0.6, 0.3, 0.2], [0.5, 0.5, 0.5, 0.4]])}
    x = torch.rand(2, 3, 64, 64)
    net.drop.p = 0.0
    opt = torch.optim.SGD(net.parameters(), lr=1e-3, momentum=0.9)
    losses = []
    for _ in range(8):
        opt.zero_grad()
        loss, items = crit(net(x), batch)
        loss.backward()
        opt.step()
        losses.append(float(loss.detach()))
        assert torch.isfinite(items).all()
    assert losses[-1] < losses[0]
