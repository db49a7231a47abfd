"""Depth Anything V2 through the user path on a CPU (issue 23): the weights name, predict
(Results.depth at the original size, a multiple-of-14 input), the Results round trip (summary /
JSON, the .npy file, the colour-mapped plot, cpu / numpy), one short training epoch on
shapes-depth with val and a checkpoint that loads back, and the fused-attention flag (SPEC K-9:
present, off by default)."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest
import torch

from libreyolo import SAMPLE_IMAGE, LibreYOLO
from libreyolo.data.shapes_depth import ensure_shapes_depth_dataset
from libreyolo.engine.results import Results
from libreyolo.errors import ConfigError
from libreyolo.kernels.attention import fused_attention_modules
from libreyolo.registry import parse_weights_name


@pytest.fixture(scope="module")
def model():
    torch.manual_seed(0)
    return LibreYOLO("LibreDepthAnythingV2s-depth.pt", pretrained=False)


def test_weights_name_and_predict_fill_results_depth(model) -> None:
    assert parse_weights_name("LibreDepthAnythingV2b-depth.pt").task == "depth"
    assert (model.FAMILY, model.task, model.size, model.nc, model.names, model.imgsz) == \
        ("depth_anything", "depth", "s", 1, {0: "depth"}, 518)
    (r,) = model(SAMPLE_IMAGE, imgsz=70)
    assert r.depth.shape == r.orig_shape == (480, 640) and r.depth.dtype == torch.float32
    assert r.boxes is None and r.probs is None and r.semantic is None and float(r.depth.min()) >= 0.0
    imgs = [np.random.default_rng(i).integers(0, 255, (h, w, 3), dtype=np.uint8) for i, (h, w) in
            enumerate([(40, 70), (64, 30)])]
    out = model.predict(imgs, imgsz=56, batch=2, rect=False)
    assert [tuple(o.depth.shape) for o in out] == [(40, 70), (64, 30)]
    (r,) = model.predict(imgs[0], imgsz=64)  # rounded up to a multiple of the 14 px patch (a warning says so)
    assert r.depth.shape == (40, 70)


def test_predict_saves_pictures_and_npy_maps(model, tmp_path: Path) -> None:
    (r,) = model.predict(SAMPLE_IMAGE, imgsz=42, save=True, save_txt=True, save_dir=str(tmp_path / "run"))
    arr = np.load(tmp_path / "run" / "depth" / "sample.npy")
    assert arr.shape == (480, 640) and np.array_equal(arr, r.depth.numpy())
    assert (tmp_path / "run" / "sample.jpg").is_file()


def test_results_round_trip(tmp_path: Path) -> None:
    d = torch.linspace(0.5, 3.0, 24).view(4, 6)
    r = Results(orig_img=np.zeros((4, 6, 3), np.uint8), path="a.jpg", names={0: "depth"}, depth=d)
    row = json.loads(r.to_json())[0]
    assert (row["height"], row["width"], row["min"], row["max"], row["array"]) == (4, 6, 0.5, 3.0, None)
    f = r.save_depth(tmp_path / "a.npy")
    assert np.array_equal(np.load(f), d.numpy()) and json.loads(r.to_json())[0]["array"] == str(f)
    img = r.plot()
    assert img.shape == (4, 6, 3) and img.dtype == np.uint8 and not np.array_equal(img[0, 0], img[-1, -1])
    assert r.save(tmp_path / "a.png").is_file()
    assert isinstance(r.numpy().depth, np.ndarray) and torch.equal(r.cpu().depth, d)
    assert "depth map" in repr(r) and r.verbose().startswith("depth 0.5-3")
    with pytest.raises(ConfigError, match="depth map of shape"):
        Results(orig_img=np.zeros((4, 6, 3), np.uint8), names={0: "depth"}, depth=torch.zeros(6, 4))
    with pytest.raises(ConfigError, match="float Tensor"):
        Results(orig_img=np.zeros((4, 6, 3), np.uint8), names={0: "depth"}, depth=torch.zeros(4, 6, dtype=torch.int64))


def test_train_one_epoch_then_val_then_reload(tmp_path: Path) -> None:
    data = ensure_shapes_depth_dataset(tmp_path / "ds", n_train=4, n_val=2, imgsz=64)
    torch.manual_seed(0)
    model = LibreYOLO("LibreDepthAnythingV2s-depth.pt", pretrained=False)
    out = model.train(data=str(data), epochs=1, imgsz=56, batch=2, workers=0, project=str(tmp_path / "runs"),
                      plots=False)
    assert 0.0 <= out["delta1"] <= 1.0 and out["fitness"] == out["delta1"] and out["abs_rel"] > 0
    assert Path(out["best"]).is_file()
    header = (Path(out["save_dir"]) / "results.csv").read_text().splitlines()[0]
    assert "train/ssi_loss" in header and "val/ssi_loss" in header and "metrics/delta1" in header, header
    m = model.val(data=str(data), imgsz=56, batch=2)
    assert m["images"] == 2.0 and m["rmse"] > 0 and 0.0 <= m["delta1"] <= 1.0
    again = LibreYOLO(out["best"])
    assert (again.FAMILY, again.task, again.nc) == ("depth_anything", "depth", 1)
    x = torch.rand(1, 3, 56, 56)
    with torch.no_grad():
        assert torch.equal(again.net.eval()(x), model.net.eval()(x))


def test_fused_attention_flag_is_off_by_default_and_flips(model) -> None:
    mods = fused_attention_modules(model.net)
    assert len(mods) == 12 and not any(m.fused_attn for m in mods) and model.arch == {}
    x = torch.rand(1, 3, 42, 42, generator=torch.Generator().manual_seed(1))
    with torch.no_grad():
        ref = model.net(x)
        model.set_arch(fused_attn=True)
        try:
            assert model.arch == {"fused_attn": True}
            assert torch.allclose(model.net(x), ref, rtol=1e-4, atol=1e-6)
        finally:
            model.set_arch(fused_attn=None)
    assert model.arch == {}
