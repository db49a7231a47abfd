"""YOLOv1 user path: the fixed input size (predict, val, train, export), predict -> Results with
plot / save, training on the shapes demo and reloading, ONNX Runtime, Darknet .weights files.

Runs at the test-only width (``width``, ``hidden``, ``input_size``) except where a published
layout is the point (the tiny Darknet file, ~108 MB)."""

from __future__ import annotations

import csv
import logging
from pathlib import Path

import numpy as np
import pytest
import torch

from libreyolo.errors import CheckpointError, ConfigError, ExportError
from libreyolo.graphs.parity import randomise_norm_stats
from libreyolo.model import Model
from libreyolo.models._darknet.convert import float_count, read_weights, unpack, write_weights
from libreyolo.models.yolo1 import nn as v1
from libreyolo.models.yolo1.convert import match_size
from libreyolo.models.yolo1.family import YOLO1
from libreyolo.registry import register_family

SMALL = {"width": 1 / 16, "hidden": 32, "input_size": 64}


@pytest.fixture(autouse=True, scope="module")
def _one_thread():
    n = torch.get_num_threads()
    torch.set_num_threads(1)
    register_family(YOLO1)
    yield
    torch.set_num_threads(n)


def _model(size: str = "tiny", nc: int = 3) -> Model:
    torch.manual_seed(0)
    return Model(YOLO1(size=size, nc=nc, **({} if size == "tiny" else {"hidden": 32}),
                       width=1 / 16, input_size=64))


# --------------------------------------------------------------------------- the fixed input size


def test_family_declares_its_fixed_input() -> None:
    big = YOLO1(size="tiny", nc=3)
    assert (big.imgsz, big.stride, big.arch, YOLO1.STRIDE) == (448, 448, {}, 448)
    assert big.TRAIN_DEFAULTS["imgsz"] == 448 and "imgsz" not in YOLO1.TRAIN_DEFAULTS  # per instance
    small = _model().family
    assert (small.imgsz, small.stride, small.TRAIN_DEFAULTS["imgsz"]) == (64, 64, 64)
    with pytest.raises(ConfigError, match="fixed 64 x 64 input"):
        small.imgsz = 96


def test_predict_letterboxes_to_the_fixed_size_whatever_imgsz(caplog: pytest.LogCaptureFixture, tmp_path: Path) -> None:
    from libreyolo import SAMPLE_IMAGE

    model = _model()
    with caplog.at_level(logging.WARNING):
        (r,) = model.predict(SAMPLE_IMAGE, imgsz=320, conf=0.0, max_det=5, device="cpu")
    assert "fixed 64 x 64 input" in caplog.text
    (r2,) = model.predict(SAMPLE_IMAGE, conf=0.0, max_det=5, device="cpu")  # the default: the same input
    torch.testing.assert_close(torch.as_tensor(r.boxes.data), torch.as_tensor(r2.boxes.data))
    h, w = r.orig_shape
    xyxy = torch.as_tensor(r.boxes.xyxy)
    assert xyxy.shape == (5, 4) and (xyxy[:, :2] >= -1).all() and (xyxy[:, 2] <= w + 1).all()
    img = r.plot()
    assert img.shape == (h, w, 3) and img.dtype == np.uint8
    out = r.save(tmp_path / "pred.jpg")
    assert Path(out).is_file()


def test_network_resizes_other_inputs_and_export_refuses_them(caplog: pytest.LogCaptureFixture, tmp_path: Path) -> None:
    model = _model()
    with caplog.at_level(logging.WARNING):
        out = model.eager_forward(torch.rand(1, 3, 96, 96))
    assert out.shape == (1, 49 * 13) and "resizing" in caplog.text
    with pytest.raises(ExportError, match="imgsz=64"):  # TorchScript: no extra needed (the floor CI step has none)
        model.export(format="torchscript", imgsz=128, file=str(tmp_path / "x.torchscript"))


def test_train_refuses_another_imgsz(tmp_path: Path) -> None:
    from libreyolo.data.shapes import ensure_shapes_dataset

    data = ensure_shapes_dataset(tmp_path / "shapes", n_train=2, n_val=1, imgsz=64)
    with pytest.raises(ConfigError, match="fixed 64 x 64 input"):
        _model().train(data=str(data), imgsz=128, epochs=1, batch=2, workers=0, device="cpu", verbose=False,
                       project=str(tmp_path / "runs"))


# --------------------------------------------------------------------------- train, val, reload, ONNX


def test_train_val_on_shapes_reload_and_onnxruntime(tmp_path: Path) -> None:
    pytest.importorskip("onnxruntime")
    from libreyolo import LibreYOLO
    from libreyolo.data.shapes import ensure_shapes_dataset

    data = ensure_shapes_dataset(tmp_path / "shapes", n_train=4, n_val=2, imgsz=64)
    model = _model(nc=80)  # the dataset has fewer classes: the head is rebuilt, the test width kept
    result = model.train(data=str(data), batch=2, workers=0, device="cpu", nbs=2, mosaic=0.0, close_mosaic=0,
                         warmup_epochs=0, verbose=False, tensorboard=False, project=str(tmp_path / "runs"),
                         seed=0, epochs=1)
    with open(f"{result['save_dir']}/results.csv", newline="") as f:
        rows = list(csv.DictReader(f))
    names = {f"train/{k}_loss" for k in YOLO1.LOSS_NAMES}
    assert len(rows) == 1 and names <= set(rows[0]) and all(float(rows[0][k]) >= 0 for k in names)
    loaded = LibreYOLO(result["best"])
    assert (loaded.FAMILY, loaded.size, loaded.nc, loaded.family.arch) == ("yolo1", "tiny", 6, model.family.arch)
    assert loaded.imgsz == 64
    metrics = loaded.val(data=str(data), batch=2, workers=0, device="cpu", verbose=False)
    assert 0.0 <= float(metrics["mAP50-95"]) <= 1.0
    path = loaded.export(format="onnx", file=str(tmp_path / "y1.onnx"))  # at the fixed size
    ort = LibreYOLO(str(path))
    assert ort.FAMILY == "yolo1" and ort.family.arch == loaded.family.arch
    x = torch.rand(1, 3, 64, 64)
    loaded.fuse()
    torch.testing.assert_close(ort.forward(x)[0], loaded.eager_forward(x), rtol=1e-3, atol=1e-4)
    img = np.random.default_rng(0).integers(0, 255, (48, 80, 3), dtype=np.uint8)
    (pt,) = loaded.predict(img, conf=0.0, max_det=20)
    (ox,) = ort.predict(img, conf=0.0, max_det=20)
    assert ox.orig_shape == pt.orig_shape == (48, 80)
    torch.testing.assert_close(torch.as_tensor(ox.boxes.conf), torch.as_tensor(pt.boxes.conf), rtol=1e-3, atol=1e-4)


def test_decode_export_head(tmp_path: Path) -> None:
    """decode=True puts the captured decode inside the ONNX graph: the same candidates."""
    pytest.importorskip("onnxruntime")
    from libreyolo import LibreYOLO

    model = _model("b")
    path = model.export(format="onnx", decode=True, file=str(tmp_path / "d.onnx"))
    ort = LibreYOLO(str(path))
    x = torch.rand(1, 3, 64, 64)
    model.fuse()
    ref = model.eager_forward(x, decoded=True)
    got = ort.forward(x)[0]
    assert got.shape == ref.shape == (1, 49 * 2 * 3, 6)
    torch.testing.assert_close(got[..., 4], ref[..., 4], rtol=1e-3, atol=1e-4)


# --------------------------------------------------------------------------- Darknet .weights


@pytest.mark.parametrize("size", v1.SIZES)
def test_darknet_layout_round_trip_and_order(size: str, tmp_path: Path) -> None:
    """pack -> file -> unpack is the identity; the file ends with the last [connected] layer's
    bias then its matrix, and the [local] layer stores its per-element bias then its blocks."""
    torch.manual_seed(5)
    net = v1.build_yolo1(size=size, nc=4, **({"hidden": 32} if size == "b" else {}), width=1 / 16, input_size=64)
    randomise_norm_stats(net, seed=1)
    net.eval()
    header, flat = read_weights(write_weights(net, tmp_path / "n.weights", seen=3))
    assert header == (0, 2, 0, 3) and flat.size == float_count(net)
    fc = net.fc2
    tail = torch.cat((fc.bias, fc.weight.flatten())).detach().numpy()
    assert np.array_equal(flat[-tail.size:], tail)
    if size == "darknet":
        loc = net.local
        block = torch.cat((loc.bias.flatten(), loc.weight.flatten())).detach().numpy()
        start = flat.size - tail.size - block.size
        assert np.array_equal(flat[start:start + block.size], block)
    fresh = v1.build_yolo1(size=size, nc=4, **({"hidden": 32} if size == "b" else {}), width=1 / 16, input_size=64)
    fresh.load_state_dict(unpack(flat.copy(), fresh, fresh.state_dict()))
    x = torch.rand(1, 3, 64, 64)
    with torch.no_grad():
        assert torch.equal(net(x), fresh.eval()(x))


@pytest.mark.parametrize("size,nc", [("b", 20), ("darknet", 20), ("darknet", 80), ("tiny", 7)])
def test_darknet_value_counts_match_their_size(size: str, nc: int) -> None:
    """The value count of each published layout (solved without allocating it) names its size and
    class count; the BatchNorm variances of the leading layers are checked on the values given."""
    with torch.device("meta"):
        want = float_count(v1.build_yolo1(size=size, nc=nc))
    lead = np.abs(np.random.default_rng(0).standard_normal(10_000_000)).astype(np.float32)  # the first layers
    assert match_size(want, lead) == (size, nc)
    assert match_size(want + 1, lead) is None


def test_tiny_darknet_file_loads_through_libreyolo(tmp_path: Path) -> None:
    from libreyolo import LibreYOLO

    torch.manual_seed(6)
    net = v1.build_yolo1(size="tiny", nc=20)
    randomise_norm_stats(net, seed=2)
    net.eval()
    path = write_weights(net, tmp_path / "yolov1-tiny.weights")
    model = LibreYOLO(str(path))
    assert (model.FAMILY, model.size, model.nc) == ("yolo1", "tiny", 20)
    x = torch.rand(1, 3, 448, 448)
    with torch.no_grad():
        assert torch.equal(net(x), model.net.eval()(x))
    data = path.read_bytes()
    path.write_bytes(data[:-4 * 100])
    with pytest.raises(CheckpointError, match="matches no"):
        LibreYOLO(str(path))
