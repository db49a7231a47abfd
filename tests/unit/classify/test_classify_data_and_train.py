"""ImageFolder data, shapes-cls, bad inputs, and a tiny end-to-end train/val."""

from __future__ import annotations

import math
from pathlib import Path

import numpy as np
import pytest
import torch

from libreyolo import LibreYOLO
from libreyolo.data.classify import (
    ClassifyDataset,
    center_crop,
    collate_classify,
    load_classify_data,
    random_resized_crop,
)
from libreyolo.data.shapes import NAMES
from libreyolo.errors import DatasetError


def test_shapes_cls_layout_and_determinism(tiny_cls: Path, tmp_path: Path):
    cfg = load_classify_data(tiny_cls)
    assert sorted(cfg.names.values()) == sorted(NAMES) and cfg.nc == 6
    assert len(cfg.train) == 36 and len(cfg.val) == 12
    for path, c in cfg.train:
        assert path.parent.name == cfg.names[c]
    from libreyolo.data.shapes_cls import ensure_shapes_cls_dataset

    again = ensure_shapes_cls_dataset(tmp_path, n_train=6, n_val=2)
    a, b = sorted((tiny_cls / "val").rglob("*.jpg")), sorted((again / "val").rglob("*.jpg"))
    assert [p.read_bytes() for p in a] == [p.read_bytes() for p in b]


def test_dataset_items_transforms_and_collate(tiny_cls: Path):
    cfg = load_classify_data(tiny_cls)
    train = ClassifyDataset(cfg.train, imgsz=48, augment=True)
    val = ClassifyDataset(cfg.val, imgsz=48, augment=False)
    it = train[3]
    assert it["img"].shape == (3, 48, 48) and it["img"].dtype == torch.uint8 and it["cls"] == cfg.train[3][1]
    assert torch.equal(train[3]["img"], it["img"])  # a function of (seed, epoch, index)
    train.set_epoch(1)
    assert not torch.equal(train[3]["img"], it["img"])
    assert torch.equal(val[0]["img"], val[0]["img"])
    batch = collate_classify([val[i] for i in range(4)])
    assert batch["img"].shape == (4, 3, 48, 48) and batch["cls"].dtype == torch.int64 and batch["cls"].shape == (4,)


def test_center_crop_and_random_resized_crop():
    img = np.zeros((40, 80, 3), np.uint8)
    img[:, 30:50] = 255  # a bright central band
    out = center_crop(img, 20)
    assert out.shape == (20, 20, 3) and out[:, 5:15].mean() > 200 and out[:, :3].mean() < 10
    rr = random_resized_crop(img, 16, np.random.default_rng(0))
    assert rr.shape == (16, 16, 3)


def test_detection_dataset_given_to_a_classifier_names_the_layout(tiny_cls: Path, tmp_path: Path):
    model = LibreYOLO("LibreResNet18-cls.pt", pretrained=False, nc=6)
    with pytest.raises(DatasetError, match=r"train/<class>"):
        model.train(data="shapes", epochs=1, project=str(tmp_path), workers=0)
    det = tmp_path / "det"
    (det / "images").mkdir(parents=True)
    (det / "labels").mkdir()
    with pytest.raises(DatasetError, match="detection dataset"):
        load_classify_data(det)
    with pytest.raises(DatasetError, match="not found"):
        load_classify_data(tmp_path / "missing")


def test_classification_dataset_given_to_a_detector_names_the_layout(tiny_cls: Path, tmp_path: Path):
    model = LibreYOLO("LibreYOLO9t.pt", pretrained=False, nc=6)
    with pytest.raises(DatasetError, match="classification dataset.*yaml"):
        model.train(data=str(tiny_cls), epochs=1, imgsz=64, project=str(tmp_path), workers=0)
    with pytest.raises(DatasetError, match="classification dataset"):
        model.val(data="shapes-cls")


def test_train_rebuilds_head_then_val_reports_top1(tiny_cls: Path, tmp_path: Path, caplog):
    torch.manual_seed(0)
    model = LibreYOLO("LibreMobileNetV4conv_small-cls.pt", pretrained=False, nc=3)
    with caplog.at_level("WARNING"):
        out = model.train(data=str(tiny_cls), epochs=2, imgsz=32, batch=8, workers=0, project=str(tmp_path / "runs"),
                          verbose=False, tensorboard=False, plots=False, amp=False)
    assert "rebuilding" in caplog.text and model.nc == 6 and sorted(model.names.values()) == sorted(NAMES)
    assert model.net(torch.rand(2, 3, 32, 32)).shape == (2, 6)
    assert 0.0 <= out["top1"] <= out["top5"] <= 1.0 and out["fitness"] == out["top1"]
    assert Path(out["best"]).is_file() and model.imgsz == 32
    csv = (Path(out["save_dir"]) / "results.csv").read_text()
    assert "train/cls_loss" in csv and "metrics/top1" in csv
    loaded = LibreYOLO(out["best"])
    assert loaded.task == "classify" and loaded.nc == 6
    m = loaded.val(data=str(tiny_cls), imgsz=32, batch=4, workers=0, verbose=False)
    assert set(m) >= {"top1", "top5", "fitness"} and math.isclose(m["top1"], out["top1"], abs_tol=1e-6)


def test_default_imgsz_for_classify(tiny_cls: Path, tmp_path: Path):
    """imgsz defaults to the family's 224 for classification (not the detection 640)."""
    from libreyolo.training.config import TrainConfig
    from libreyolo.training.trainer import Trainer

    model = LibreYOLO("LibreConvNeXtatto-cls.pt", pretrained=False, nc=6)
    t = Trainer(model, TrainConfig(data=str(tiny_cls)), explicit={"data"})
    cfg = t._task_defaults(t.cfg)
    assert cfg.imgsz == 224 and cfg.project == "runs/classify"
    t2 = Trainer(model, TrainConfig(data=str(tiny_cls), imgsz=64), explicit={"data", "imgsz"})
    assert t2._task_defaults(t2.cfg).imgsz == 64
