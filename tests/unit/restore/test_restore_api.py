"""The restore task through the user path on a CPU: weights names, predict (padding to the
network's multiple and cropping back; SR at the scaled size), Results (save / plot / to_json /
round trip), a one-epoch training run of each family on a tiny demo set, its checkpoint loading
back, and val (PSNR / SSIM)."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest
import torch

from libreyolo import LibreYOLO
from libreyolo._cv import cv2
from libreyolo.data.shapes_restore import ensure_shapes_restore_dataset
from libreyolo.engine.results import Results
from libreyolo.errors import ConfigError
from libreyolo.tasks import get_task
from libreyolo.tasks.restore import pad_batch


def test_predict_pads_to_the_multiple_and_crops_back() -> None:
    torch.manual_seed(0)
    model = LibreYOLO("LibreNAFNett-restore.pt", pretrained=False)
    assert (model.FAMILY, model.task, model.nc, model.stride) == ("nafnet", "restore", 1, 16)
    imgs = [np.random.default_rng(i).integers(0, 255, (h, w, 3), dtype=np.uint8) for i, (h, w) in
            enumerate([(30, 50), (17, 16)])]
    out = model.predict(imgs, batch=2)
    assert [tuple(r.restored.shape) for r in out] == [(3, 30, 50), (3, 17, 16)]
    assert out[0].boxes is None and out[0].restored.dtype == torch.float32
    assert 0.0 <= float(out[0].restored.min()) and float(out[0].restored.max()) <= 1.0
    # the padded batch's crop equals the image run on its own padded to 32 x 64 (edge padding)
    alone = model.predict(imgs[0])[0]
    assert torch.allclose(alone.restored, out[0].restored, atol=1e-5)
    x = torch.from_numpy(imgs[0][:, :, ::-1].copy()).permute(2, 0, 1)
    with torch.no_grad():
        ref = model.net(pad_batch([x], 16).float() / 255)[0, :, :30, :50].clamp(0, 1)
    assert torch.allclose(ref, alone.restored, atol=1e-5)
    sr = LibreYOLO("LibreRealESRGANx4b6-restore.pt", pretrained=False)
    (r,) = sr.predict(imgs[1])
    assert tuple(r.restored.shape) == (3, 68, 64) and r.verbose() == "restored 64x68 (x4)"


def test_results_save_plot_json_and_checks(tmp_path: Path) -> None:
    orig = np.zeros((4, 6, 3), np.uint8)
    restored = torch.zeros(3, 16, 24)
    restored[2] = 1.0  # blue in RGB
    r = Results(orig_img=orig, path="in.png", names={0: "image"}, restored=restored)
    file = r.save(tmp_path / "out.png")
    back = cv2.imread(str(file))
    assert back.shape == (16, 24, 3) and back[0, 0].tolist() == [255, 0, 0]  # BGR on disk
    side = r.plot()
    assert side.shape == (16, 48, 3) and side[:, :24].max() == 0 and side[0, 30].tolist() == [255, 0, 0]
    row = json.loads(r.to_json())[0]
    assert (row["width"], row["height"], row["scale"], row["mean"]) == (24, 16, 4, [0.0, 0.0, 1.0])
    again = Results(orig_img=orig, names={0: "image"}, restored=torch.from_numpy(back[:, :, ::-1].copy())
                    .permute(2, 0, 1).float() / 255)
    assert torch.equal(again.restored, restored)  # 0 / 1 survive the 8-bit round trip exactly
    assert r.cpu().restored is r.restored and "restored image" in repr(r)
    with pytest.raises(ConfigError, match="no integer multiple"):
        Results(orig_img=orig, names={0: "image"}, restored=torch.zeros(3, 16, 23))
    with pytest.raises(ConfigError, match="float Tensor"):
        Results(orig_img=orig, names={0: "image"}, restored=torch.zeros(16, 24))


@pytest.mark.parametrize("weights,kind,hq", [("LibreNAFNett-restore.pt", "denoise", 64),
                                             ("LibreRealESRGANx4b6-restore.pt", "sr", 128)])
def test_train_one_epoch_val_and_reload(tmp_path: Path, weights: str, kind: str, hq: int) -> None:
    data = ensure_shapes_restore_dataset(tmp_path / "data", kind=kind, n_train=2, n_val=2, imgsz=hq)
    torch.manual_seed(0)
    model = LibreYOLO(weights, pretrained=False)
    res = model.train(data=str(data), epochs=1, imgsz=32, batch=2, workers=0, project=str(tmp_path / "runs"),
                      verbose=False, plots=False)
    assert np.isfinite(res["psnr"]) and 0 < res["psnr"] < 100 and -1 <= res["ssim"] <= 1
    header = (Path(res["save_dir"]) / "results.csv").read_text().splitlines()[0].split(",")
    assert {"train/l1_loss", "val/l1_loss", "metrics/psnr", "metrics/ssim"} <= set(header)
    best = LibreYOLO(res["best"])
    assert (best.FAMILY, best.task, best.nc) == (model.FAMILY, "restore", 1)
    m = best.val(data=str(data), imgsz=32, batch=2, workers=0, verbose=False)
    assert set(m) >= {"psnr", "ssim", "fitness"} and m["fitness"] == m["psnr"]
    assert m.summary().startswith("images 2  PSNR")


def test_task_refuses_detection_options() -> None:
    class Cfg:
        single_cls, rect, multi_scale = False, True, 0.0

    with pytest.raises(ConfigError, match="rect=True"):
        get_task("restore").check_train_options(Cfg())
    Cfg.rect, Cfg.multi_scale = False, 0.5
    with pytest.raises(ConfigError, match="multi_scale"):
        get_task("restore").check_train_options(Cfg())


def test_rect_false_pads_to_imgsz() -> None:
    model = LibreYOLO("LibreNAFNett-restore.pt", pretrained=False)
    img = np.random.default_rng(0).integers(0, 255, (20, 30, 3), dtype=np.uint8)
    (r,) = model.predict(img, imgsz=32, rect=False)
    assert tuple(r.restored.shape) == (3, 20, 30)
    with pytest.raises(ConfigError, match="rect=False pads each image to imgsz"):
        model.predict(img, imgsz=16, rect=False)


def test_the_psnr_loss_is_chosen_on_the_model() -> None:
    model = LibreYOLO("LibreNAFNett-restore.pt", pretrained=False)
    assert model.build_criterion().kind == "l1"
    model.LOSS = "psnr"  # written through to the family instance
    assert model.build_criterion().kind == "psnr"
