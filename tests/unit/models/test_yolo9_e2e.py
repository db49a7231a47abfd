"""YOLOv9 end-to-end: the dual head's contract, parameter counts, the NMS-free postprocess on
hand-made outputs, captured decode == eager postprocess, export of the whole selection (CPU)."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest
import torch
from torch import nn

from libreyolo.graphs.parity import randomise_norm_stats
from libreyolo.model import Model
from libreyolo.models.yolo9_e2e.family import YOLO9E2E
from libreyolo.models.yolo9_e2e.nn import build_yolo9_e2e
from libreyolo.models.yolo9_e2e.postprocess import decode, postprocess
from libreyolo.ops.candidates import select_detections

R = 16

# At 80 classes: (whole network unfused, inference network = without the one-to-many branches,
# unfused, the same two fused). No published count exists (no YOLOv9 with a v10Detect head
# upstream); the Ultralytics-built network of this layout has the unfused whole count + 16 (its
# DFL constant), checked in tests/unit/convert/test_yolo9_variants_ultralytics.py.
PARAMS = {"t": (2_154_768, 1_796_592, 2_118_128, 1_761_344), "s": (6_967_424, 6_345_872, 6_844_032, 6_224_592)}


def _n(m: nn.Module) -> int:
    return sum(p.numel() for p in m.parameters())


@pytest.mark.parametrize("size", ["t", "s"])
def test_param_counts(size: str) -> None:
    net = build_yolo9_e2e(size=size, nc=80)
    whole, infer = _n(net), _n(net) - _n(net.head.o2m)
    net.fuse()
    assert (whole, infer, _n(net), _n(net) - _n(net.head.o2m)) == PARAMS[size]


def test_eval_gives_one_to_one_levels_train_adds_one_to_many() -> None:
    torch.manual_seed(0)
    net = build_yolo9_e2e(size="t", nc=3)
    for a, b in zip(net.head.o2o.state_dict().values(), net.head.o2m.state_dict().values(), strict=True):
        assert torch.equal(a, b)  # the one-to-one head starts as a copy
    x = torch.rand(2, 3, 64, 96)
    with torch.no_grad():
        ev = net.eval()(x)
        tr = net.train()(x)
    want = [(2, 4 * R + 3, 64 // s, 96 // s) for s in (8, 16, 32)]
    assert [tuple(o.shape) for o in ev] == want and [tuple(o.shape) for o in tr] == want * 2
    assert len(YOLO9E2E.OUTPUT_NAMES) == len(ev)


def test_one_to_one_loss_does_not_reach_the_backbone() -> None:
    torch.manual_seed(1)
    net = build_yolo9_e2e(size="t", nc=2).train()
    out = net(torch.rand(2, 3, 64, 64))
    sum(o.square().mean() for o in out[:3]).backward()  # the one-to-one levels only
    assert net.stem1.conv.weight.grad is None and net.bottom5.cv4.conv.weight.grad is None
    assert all(p.grad is not None for p in net.head.o2o.parameters())
    assert all(p.grad is None for p in net.head.o2m.parameters())
    net.zero_grad(set_to_none=True)
    out = net(torch.rand(2, 3, 64, 64))
    sum(o.square().mean() for o in out[3:]).backward()
    assert [n for n, p in net.named_parameters() if p.grad is None and not n.startswith("head.o2o.")] == []


class _Meta(nn.Module):
    def __init__(self, nc: int) -> None:
        super().__init__()
        self.nc, self.reg_max, self.strides = nc, R, (8, 16, 32)


def _empty(nc: int, b: int = 1) -> list[torch.Tensor]:
    raw = [torch.zeros(b, 4 * R + nc, 64 // s, 64 // s) for s in (8, 16, 32)]
    for t in raw:
        t[:, 4 * R:] = -20.0
    return raw


def _put(raw: list[torch.Tensor], *, level: int, row: int, col: int, ltrb: tuple[int, int, int, int],
         logits: dict[int, float], b: int = 0) -> None:
    t = raw[level]
    for side, d in enumerate(ltrb):
        t[b, side * R:(side + 1) * R, row, col] = -30.0
        t[b, side * R + d, row, col] = 30.0
    for c, v in logits.items():
        t[b, 4 * R + c, row, col] = v


def _pp(raw: list[torch.Tensor], nc: int, **kw: object) -> list[torch.Tensor]:
    args = {"conf": 0.25, "iou": 0.7, "classes": None, "max_det": 300, "agnostic": False, **kw}
    return postprocess(raw, net=_Meta(nc), **args)  # type: ignore[arg-type]


def test_no_nms_duplicates_and_a_second_class_of_one_anchor_are_kept() -> None:
    raw = _empty(3)
    _put(raw, level=0, row=2, col=3, ltrb=(1, 2, 3, 1), logits={0: 4.0, 2: 3.0})  # two classes, one box
    _put(raw, level=0, row=2, col=4, ltrb=(2, 2, 2, 1), logits={0: 2.0})  # the same box again, class 0
    (det,) = _pp(raw, 3)
    sig = torch.sigmoid(torch.tensor([4.0, 3.0, 2.0]))
    want = torch.tensor([[20.0, 4.0, 52.0, 28.0, sig[0], 0.0], [20.0, 4.0, 52.0, 28.0, sig[1], 2.0],
                         [20.0, 4.0, 52.0, 28.0, sig[2], 0.0]])
    torch.testing.assert_close(det, want, rtol=0, atol=1e-4)
    # iou and agnostic change nothing: there is no NMS
    for kw in ({"iou": 0.1}, {"agnostic": True}):
        torch.testing.assert_close(_pp(raw, 3, **kw)[0], det, rtol=0, atol=0)


def test_conf_max_det_classes_and_batch() -> None:
    raw = _empty(3, b=2)
    _put(raw, level=1, row=1, col=1, ltrb=(1, 1, 1, 1), logits={1: 3.0, 2: 1.0}, b=1)
    _put(raw, level=2, row=0, col=0, ltrb=(0, 0, 1, 1), logits={2: -2.0}, b=1)  # score 0.12
    d0, d1 = _pp(raw, 3)
    assert d0.shape == (0, 6) and d1[:, 5].tolist() == [1.0, 2.0]
    assert _pp(raw, 3, conf=0.1)[1][:, 5].tolist() == [1.0, 2.0, 2.0]
    assert _pp(raw, 3, conf=0.1, max_det=1)[1][:, 5].tolist() == [1.0]
    (_, only2) = _pp(raw, 3, conf=0.1, classes=[2])
    assert only2[:, 5].tolist() == [2.0, 2.0]
    torch.testing.assert_close(only2[:, 4], torch.sigmoid(torch.tensor([1.0, -2.0])))
    assert all(d.shape == (0, 6) for d in _pp(raw, 3, classes=[]))


def test_decode_is_fixed_size_whatever_the_values() -> None:
    net = _Meta(4)
    for fill in (-50.0, 0.0, 50.0):
        raw = [torch.full((2, 4 * R + 4, 64 // s, 64 // s), fill) for s in (8, 16, 32)]
        assert decode(raw, net=net, k=300).shape == (2, 64 + 16 + 4, 6)
        assert decode(raw, net=net, k=20).shape == (2, 20, 6)


def test_captured_decode_then_threshold_equals_eager_postprocess_bitwise() -> None:
    """The prediction path: the family's decode (k = DECODE_TOPK = the default max_det), then the
    eager threshold without NMS, is the eager postprocess at that max_det, bit for bit."""
    torch.manual_seed(2)
    model = YOLO9E2E(size="t", nc=5)
    randomise_norm_stats(model.net, seed=0)
    with torch.no_grad():
        raw = model.net.eval()(torch.rand(2, 3, 160, 160))
        cands = model.decode(raw)
    k = YOLO9E2E.DECODE_TOPK
    assert cands.shape == (2, k, 6) and not YOLO9E2E.DECODE_NMS
    for conf in (0.0, 0.3, 0.6):
        got = select_detections(cands, conf=conf, iou=0.7, max_det=k, agnostic=False, nms=False)
        want = model.postprocess(raw, conf=conf, iou=0.7, classes=None, max_det=k, agnostic=False)
        assert all(torch.equal(g, w) for g, w in zip(got, want, strict=True))


def test_predict_runs_the_decode_and_no_nms(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    from libreyolo import LibreYOLO
    from libreyolo.ops import candidates

    model = LibreYOLO("LibreYOLO9e2et.pt", pretrained=False, nc=3)
    assert model.FAMILY == "yolo9_e2e"

    def no_nms(*a: object, **k: object) -> None:
        raise AssertionError("NMS ran for the one-to-one head")

    monkeypatch.setattr(candidates, "non_max_suppression", no_nms)
    (res,) = model.predict(np.zeros((100, 120, 3), np.uint8) + 127, imgsz=64, conf=0.0, max_det=10, device="cpu")
    assert 0 < res.boxes.xyxy.shape[0] <= 10 and res.plot().shape == (100, 120, 3)
    res.save(str(tmp_path / "pred.jpg"))
    assert (tmp_path / "pred.jpg").stat().st_size > 0


def test_export_with_the_selection_inside_matches_eager(tmp_path: Path) -> None:
    """``export(nms=True)`` for this family holds the whole selection (top-k, conf mask; no NMS
    node) and ONNX Runtime gives the eager postprocess's detections."""
    onnx = pytest.importorskip("onnx")
    ort = pytest.importorskip("onnxruntime")
    torch.manual_seed(3)
    model = Model(YOLO9E2E(size="t", nc=3))
    randomise_norm_stats(model.net, seed=1)
    path = model.export(format="onnx", imgsz=64, nms=True, max_det=20, conf=0.2, file=str(tmp_path / "e2e.onnx"))
    assert "NonMaxSuppression" not in {n.op_type for n in onnx.load(str(path)).graph.node}
    x = torch.rand(1, 3, 64, 64)
    (got,) = ort.InferenceSession(str(path)).run(None, {"images": x.numpy()})
    model.fuse()
    with torch.no_grad():
        (want,) = model.postprocess(model.net.eval()(x), conf=0.2, iou=0.7, classes=None, max_det=20, agnostic=False)
    got = torch.from_numpy(got[0])
    assert got.shape == (20, 6) and (got[want.shape[0]:] == 0).all()
    torch.testing.assert_close(got[: want.shape[0]], want, rtol=1e-4, atol=1e-3)
