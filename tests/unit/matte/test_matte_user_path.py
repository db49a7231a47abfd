"""The matte task through the user path on a CPU with the tiny BiRefNet: the weights name, predict
(Results.alpha at the original size), plot / save (overlay + mask PNG) / save_txt / to_json, one
short training epoch on shapes-matte with val and a checkpoint that loads back, the ONNX export
(opset raised to 19 for DeformConv) run by ONNX Runtime, and the demo set's determinism."""

from __future__ import annotations

import hashlib
import json
from pathlib import Path

import numpy as np
import pytest
import torch

from libreyolo import SAMPLE_IMAGE, LibreYOLO
from libreyolo.data.matte import load_matte_data, read_alpha
from libreyolo.data.shapes_matte import ensure_shapes_matte_dataset, render_matte
from libreyolo.engine.results import Results
from libreyolo.errors import ConfigError, DatasetError
from libreyolo.registry import parse_weights_name


@pytest.fixture(scope="module")
def model():
    torch.manual_seed(0)
    return LibreYOLO("LibreBiRefNettiny-matte.pt", pretrained=False)


def test_weights_name_and_predict_fill_results_alpha(model) -> None:
    assert parse_weights_name("LibreBiRefNetl-matte.pt").task == "matte"
    assert (model.FAMILY, model.task, model.size, model.nc, model.names, model.imgsz) == \
        ("birefnet", "matte", "tiny", 1, {0: "foreground"}, 1024)
    (r,) = model(SAMPLE_IMAGE, imgsz=64)
    assert r.alpha.shape == r.orig_shape == (480, 640) and r.alpha.dtype == torch.float32
    assert r.boxes is None and r.depth is None and 0.0 <= float(r.alpha.min()) <= float(r.alpha.max()) <= 1.0
    imgs = [np.random.default_rng(i).integers(0, 255, (h, w, 3), dtype=np.uint8) for i, (h, w) in
            enumerate([(40, 70), (64, 30)])]
    out = model.predict(imgs, imgsz=64, batch=2, rect=False)
    assert [tuple(o.alpha.shape) for o in out] == [(40, 70), (64, 30)]


def test_predict_saves_overlay_and_mask_pngs(model, tmp_path: Path) -> None:
    (r,) = model.predict(SAMPLE_IMAGE, imgsz=64, save=True, save_txt=True, save_dir=str(tmp_path / "run"))
    mask = read_alpha(tmp_path / "run" / "masks" / "sample.png")
    assert mask.shape == (480, 640) and np.abs(mask - r.alpha.numpy()).max() <= 0.5 / 255 + 1e-6
    assert (tmp_path / "run" / "sample.jpg").is_file() and (tmp_path / "run" / "sample_alpha.png").is_file()


def test_results_round_trip(tmp_path: Path) -> None:
    a = torch.zeros(4, 6)
    a[1:3, 1:4] = 1.0
    img = np.full((4, 6, 3), 200, np.uint8)
    r = Results(orig_img=img, path="a.jpg", names={0: "foreground"}, alpha=a)
    row = json.loads(r.to_json())[0]
    assert (row["height"], row["width"], row["foreground"], row["mask"]) == (4, 6, 0.25, None)
    f = r.save_alpha(tmp_path / "a.png")
    assert np.array_equal(read_alpha(f), a.numpy()) and json.loads(r.to_json())[0]["mask"] == str(f)
    drawn = r.plot()
    assert drawn.shape == (4, 6, 3) and drawn[0, 0].tolist() != [200, 200, 200]  # background dimmed
    assert r.save(tmp_path / "o.png").is_file() and (tmp_path / "o_alpha.png").is_file()
    assert isinstance(r.numpy().alpha, np.ndarray) and torch.equal(r.cpu().alpha, a)
    assert "alpha matte" in repr(r) and r.verbose() == "foreground 25%"
    with pytest.raises(ConfigError, match="alpha map of shape"):
        Results(orig_img=img, names={0: "foreground"}, alpha=torch.zeros(6, 4))
    with pytest.raises(ConfigError, match="float Tensor"):
        Results(orig_img=img, names={0: "foreground"}, alpha=torch.zeros(4, 6, dtype=torch.int64))
    with pytest.raises(ConfigError, match=".png"):
        r.save_alpha(tmp_path / "a.jpg")


def test_shapes_matte_is_exact_and_byte_identical(tmp_path: Path) -> None:
    img, mask = render_matte(3, 0, 5, imgsz=96)
    again = render_matte(3, 0, 5, imgsz=96)
    assert np.array_equal(img, again[0]) and np.array_equal(mask, again[1])
    assert set(np.unique(mask).tolist()) <= {0, 255} and mask.any()
    a = ensure_shapes_matte_dataset(tmp_path / "a", n_train=2, n_val=1, imgsz=64)
    b = ensure_shapes_matte_dataset(tmp_path / "b", n_train=2, n_val=1, imgsz=64)

    def digest(root: Path) -> list[str]:
        return [hashlib.sha256(p.read_bytes()).hexdigest() for p in sorted(root.rglob("*.*")) if p.suffix != ".yaml"]

    assert digest(a.parent) == digest(b.parent) and len(digest(a.parent)) == 6
    cfg = load_matte_data(a)
    assert np.array_equal(read_alpha(cfg.train[0][1]) * 255, render_matte(0, 0, 0, imgsz=64)[1].astype(np.float32))
    with pytest.raises(DatasetError, match="not found"):
        load_matte_data(str(tmp_path / "nowhere.yaml"))


def test_train_one_epoch_then_val_then_reload(tmp_path: Path) -> None:
    data = ensure_shapes_matte_dataset(tmp_path / "ds", n_train=4, n_val=2, imgsz=64)
    torch.manual_seed(0)
    model = LibreYOLO("LibreBiRefNettiny-matte.pt", pretrained=False)
    out = model.train(data=str(data), epochs=1, imgsz=64, batch=2, workers=0, project=str(tmp_path / "runs"),
                      plots=False)
    assert 0.0 <= out["iou"] <= 1.0 and out["fitness"] == out["iou"] and 0.0 <= out["mae"] <= 1.0
    assert Path(out["best"]).is_file()
    header = (Path(out["save_dir"]) / "results.csv").read_text().splitlines()[0]
    assert "train/bce_loss" in header and "train/gdt_loss" in header and "metrics/iou" in header, header
    m = model.val(data=str(data), imgsz=64, batch=2)
    assert m["images"] == 2.0 and 0.0 <= m["smeasure"] <= 1.0 and 0.0 <= m["fmeasure"] <= 1.0
    again = LibreYOLO(out["best"])
    assert (again.FAMILY, again.task, again.nc) == ("birefnet", "matte", 1)
    x = torch.rand(1, 3, 64, 64)
    with torch.no_grad():
        assert torch.equal(again.net.eval()(x), model.net.eval()(x))


def test_onnx_export_runs_deformconv_in_onnxruntime(model, tmp_path: Path, caplog) -> None:
    onnx = pytest.importorskip("onnx")
    pytest.importorskip("onnxruntime")
    path = model.export(format="onnx", imgsz=64, file=str(tmp_path / "m.onnx"))
    assert "opset 19 instead of 17" in caplog.text
    proto = onnx.load(str(path))
    assert [o.version for o in proto.opset_import if o.domain in ("", "ai.onnx")] == [19]
    assert "DeformConv" in {n.op_type for n in proto.graph.node}
    loaded = LibreYOLO(str(path))
    img = np.random.default_rng(0).integers(0, 255, (48, 80, 3), dtype=np.uint8)
    (pt,), (ox,) = model.predict(img, imgsz=64, rect=False), loaded.predict(img, imgsz=64, rect=False)
    assert ox.alpha.shape == (48, 80) and torch.allclose(ox.alpha, pt.alpha, atol=1e-3)
