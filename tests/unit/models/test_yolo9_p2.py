"""YOLOv9-P2: network contract (four levels), parameter counts, fusing, the stride-4 postprocess,
captured decode == eager selection, the user path (CPU, tiny inputs)."""

from __future__ import annotations

import numpy as np
import pytest
import torch
from torch import nn

from libreyolo.errors import ConfigError
from libreyolo.graphs.parity import randomise_norm_stats
from libreyolo.models.yolo9_p2.family import YOLO9P2
from libreyolo.models.yolo9_p2.nn import build_yolo9_p2
from libreyolo.ops.candidates import select_detections

REG_MAX = 16

# (unfused, fused) parameters at 80 classes with the default grouped (DDetect) box branch. No
# paper or upstream config publishes a YOLOv9-P2, so these pin our build; the Ultralytics-built
# network of the same layout is checked in tests/unit/convert/test_yolo9_variants_ultralytics.py.
PARAMS = {"t": (2_248_176, 2_210_160), "s": (7_230_624, 7_100_448)}


def _n(net: nn.Module) -> int:
    return sum(p.numel() for p in net.parameters())


@pytest.mark.parametrize("size", ["t", "s"])
def test_param_counts_fused_and_unfused(size: str) -> None:
    net = build_yolo9_p2(size=size, nc=80)
    unfused = _n(net)
    fused = _n(net.fuse())
    assert (unfused, fused) == PARAMS[size]


@pytest.mark.parametrize("mode", ["train", "eval"])
def test_four_levels_in_train_and_eval(mode: str) -> None:
    torch.manual_seed(0)
    net = build_yolo9_p2(size="t", nc=3).train(mode == "train")
    assert net.strides == (4, 8, 16, 32)
    with torch.no_grad():
        out = net(torch.rand(2, 3, 64, 96))
    assert [tuple(o.shape) for o in out] == [(2, 4 * REG_MAX + 3, 64 // s, 96 // s) for s in (4, 8, 16, 32)]
    assert all(torch.isfinite(o).all() for o in out)
    assert len(YOLO9P2.OUTPUT_NAMES) == len(out)


def test_fuse_equals_unfused() -> None:
    torch.manual_seed(1)
    net = build_yolo9_p2(size="t", nc=5)
    randomise_norm_stats(net, seed=0)
    net.eval()
    x = torch.rand(1, 3, 64, 64)
    with torch.no_grad():
        ref = [o.clone() for o in net(x)]
        got = net.fuse()(x)
    for r, g in zip(ref, got, strict=True):
        assert (r - g).abs().max().item() <= 1e-4 * max(1.0, r.abs().max().item())


def test_backward_reaches_every_parameter() -> None:
    torch.manual_seed(2)
    net = build_yolo9_p2(size="t", nc=2).train()
    sum(o.square().mean() for o in net(torch.rand(2, 3, 64, 64))).backward()
    assert [n for n, p in net.named_parameters() if p.grad is None] == []


def test_bad_arguments_raise_config_error() -> None:
    with pytest.raises(ConfigError, match="yolo9_p2 has no size 'm'"):
        build_yolo9_p2(size="m", nc=80)
    with pytest.raises(ConfigError, match="box_groups"):
        build_yolo9_p2(size="t", nc=80, box_groups=2)


def test_a_stride_4_anchor_decodes_at_stride_4() -> None:
    """One confident anchor of the stride-4 level, integer distances: the box is exact."""
    model = YOLO9P2(size="t", nc=2)
    raw = [torch.zeros(1, 4 * REG_MAX + 2, 64 // s, 64 // s) for s in (4, 8, 16, 32)]
    for r in raw:
        r[:, 4 * REG_MAX:] = -20.0
    t = raw[0]
    for side, d in enumerate((1, 2, 3, 1)):
        t[0, side * REG_MAX:(side + 1) * REG_MAX, 2, 3] = -30.0
        t[0, side * REG_MAX + d, 2, 3] = 30.0
    t[0, 4 * REG_MAX + 1, 2, 3] = 5.0
    (det,) = model.postprocess(raw, conf=0.25, iou=0.7, classes=None, max_det=10, agnostic=False)
    # anchor centre (3.5, 2.5) cells at stride 4 -> (2.5, 0.5, 6.5, 3.5) * 4
    torch.testing.assert_close(det, torch.tensor([[10.0, 2.0, 26.0, 14.0, torch.sigmoid(torch.tensor(5.0)), 1.0]]),
                               rtol=0, atol=1e-4)


def test_captured_decode_then_selection_equals_eager_postprocess() -> None:
    torch.manual_seed(3)
    model = YOLO9P2(size="t", nc=3)
    randomise_norm_stats(model.net, seed=1)
    with torch.no_grad():
        raw = model.net.eval()(torch.rand(2, 3, 64, 64))
        cands = model.decode(raw)
    assert cands.shape == (2, min(YOLO9P2.DECODE_TOPK, 16 * 16 + 8 * 8 + 4 * 4 + 2 * 2), 6)
    got = select_detections(cands, conf=0.3, iou=0.7, max_det=50, agnostic=False)
    want = model.postprocess(raw, conf=0.3, iou=0.7, classes=None, max_det=50, agnostic=False)
    for g, w in zip(got, want, strict=True):
        assert g.shape == w.shape
        torch.testing.assert_close(g, w, rtol=0, atol=1e-5)


def test_untrained_predict_end_to_end_and_native_checkpoint(tmp_path) -> None:  # noqa: ANN001
    from libreyolo import LibreYOLO

    model = LibreYOLO("LibreYOLO9p2t.pt", pretrained=False, nc=3)
    assert model.FAMILY == "yolo9_p2" and model.size == "t" and model.arch == {}
    (res,) = model.predict(np.zeros((100, 120, 3), np.uint8) + 127, imgsz=64, conf=0.0, max_det=10, device="cpu")
    assert 0 < res.boxes.xyxy.shape[0] <= 10
    assert res.plot().shape == (100, 120, 3)
    res.save(str(tmp_path / "pred.jpg"))
    assert (tmp_path / "pred.jpg").stat().st_size > 0
    model.set_arch(box_groups=1)
    again = LibreYOLO(str(model.save(tmp_path / "p2.pt")))
    assert again.FAMILY == "yolo9_p2" and again.arch == {"box_groups": 1}
    x = torch.rand(1, 3, 64, 64)
    with torch.no_grad():
        for a, b in zip(model.net.eval()(x), again.net.eval()(x), strict=True):
            assert torch.equal(a, b)


def test_train_on_shapes_val_and_reload(tmp_path) -> None:  # noqa: ANN001
    from libreyolo import LibreYOLO
    from libreyolo.data.shapes import ensure_shapes_dataset
    from libreyolo.model import Model

    data = ensure_shapes_dataset(tmp_path / "shapes", n_train=8, n_val=4, imgsz=64)
    model = Model(YOLO9P2(size="t", nc=80))  # the dataset has 6 classes: the head is rebuilt
    result = model.train(data=str(data), imgsz=64, batch=4, workers=0, device="cpu", nbs=4, mosaic=0.0,
                         close_mosaic=0, warmup_epochs=0, optimizer="AdamW", lr0=0.002, verbose=False,
                         tensorboard=False, project=str(tmp_path / "runs"), seed=0, epochs=1)
    assert 0.0 <= result["mAP50-95"] <= result["mAP50"] <= 1.0
    metrics = model.val(data=str(data), imgsz=64, batch=4, device="cpu", workers=0, verbose=False)
    assert 0.0 <= metrics["mAP50-95"] <= metrics["mAP50"] <= 1.0
    loaded = LibreYOLO(result["best"])
    assert loaded.FAMILY == "yolo9_p2" and loaded.nc == 6 and len(loaded.net.head.box) == 4
    x = torch.rand(1, 3, 64, 64)
    with torch.no_grad():
        for a, b in zip(model.net.eval()(x), loaded.net.eval()(x), strict=True):
            assert torch.equal(a, b)
