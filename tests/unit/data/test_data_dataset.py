"""DetectionDataset items, collate, determinism and the DataLoader (workers 0 and 2)."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest
import torch

from libreyolo.data.augment import AugmentConfig
from libreyolo.data.config import load_data_config
from libreyolo.data.dataset import DetectionDataset, collate_detection
from libreyolo.data.loader import build_dataloader
from libreyolo.errors import ConfigError, DatasetError


@pytest.fixture(scope="module")
def cfg(tiny_shapes: Path):
    return load_data_config(tiny_shapes)


def _check_item(it: dict, size: tuple[int, int]) -> None:
    assert it["img"].dtype == torch.uint8 and tuple(it["img"].shape) == (3, *size)
    assert it["cls"].dtype == torch.int64 and it["cls"].ndim == 1
    assert it["bboxes"].dtype == torch.float32 and tuple(it["bboxes"].shape) == (len(it["cls"]), 4)
    b = it["bboxes"]
    assert ((b[:, :2] - b[:, 2:] / 2) >= -1e-5).all() and ((b[:, :2] + b[:, 2:] / 2) <= 1 + 1e-5).all()
    assert (b[:, 2:] > 0).all()


def test_val_item_letterbox_and_ratio_pad(cfg) -> None:
    ds = DetectionDataset(cfg.val, imgsz=96, augment=False, nc=cfg.nc)
    assert len(ds) == 4
    for i in range(len(ds)):
        it = ds[i]
        _check_item(it, (96, 96))
        h0, w0 = it["ori_shape"]
        assert max(h0, w0) == 64 and it["im_file"] == ds.im_files[i]
        (ratio,), (padw, padh) = it["ratio_pad"]
        assert ratio == pytest.approx(1.5)
        # every label maps original -> img through ratio_pad
        lab = ds.labels[i]
        x_orig = lab[:, 1] * w0
        y_orig = lab[:, 2] * h0
        np.testing.assert_allclose(x_orig * ratio + padw, it["bboxes"][:, 0].numpy() * 96, atol=0.5)
        np.testing.assert_allclose(y_orig * ratio + padh, it["bboxes"][:, 1].numpy() * 96, atol=0.5)
        assert it["cls"].tolist() == lab[:, 0].astype(int).tolist()


def test_train_items_deterministic_per_epoch(cfg) -> None:
    ds = DetectionDataset(cfg.train, imgsz=64, augment=True, nc=cfg.nc)
    a = [ds[i] for i in range(len(ds))]
    for it in a:
        _check_item(it, (64, 64))
    b = [ds[i] for i in range(len(ds))]
    assert all(torch.equal(x["img"], y["img"]) and torch.equal(x["bboxes"], y["bboxes"]) for x, y in zip(a, b, strict=True))
    ds.set_epoch(1)
    assert ds.epoch == 1
    c = [ds[i] for i in range(len(ds))]
    assert not all(torch.equal(x["img"], y["img"]) for x, y in zip(a, c, strict=True))
    ds.set_epoch(0)
    assert torch.equal(ds[3]["img"], a[3]["img"])
    assert torch.equal(ds[-1]["img"], a[-1]["img"])
    with pytest.raises(IndexError):
        ds[len(ds)]
    with pytest.raises(ConfigError, match="epoch"):
        ds.set_epoch(-1)


def test_close_mosaic(cfg) -> None:
    hyp = AugmentConfig(mosaic=1.0, translate=0.0, scale=0.0, fliplr=0.0, hsv_h=0.0, hsv_s=0.0, hsv_v=0.0)
    train = DetectionDataset(cfg.train, imgsz=64, augment=True, hyp=hyp, nc=cfg.nc)
    val = DetectionDataset(cfg.train, imgsz=64, augment=False, nc=cfg.nc)
    assert train.mosaic_enabled
    assert not torch.equal(train[0]["img"], val[0]["img"])
    train.close_mosaic()
    assert not train.mosaic_enabled
    # without mosaic and with identity augmentation a training item is the letterboxed image
    for i in range(len(train)):
        t, v = train[i], val[i]
        assert (t["img"].int() - v["img"].int()).abs().max() <= 1
        torch.testing.assert_close(t["bboxes"], v["bboxes"], atol=1e-5, rtol=0)


def test_rect_val_shapes_and_collate_padding(cfg) -> None:
    ds = DetectionDataset(cfg.val, imgsz=64, augment=False, nc=cfg.nc, rect=True)
    ratios = ds.shapes[:, 0] / ds.shapes[:, 1]
    assert (np.diff(ratios) >= 0).all()  # sorted by aspect ratio
    items = [ds[i] for i in range(len(ds))]
    for it in items:
        assert it["img"].shape[1] % 32 == 0 and it["img"].shape[2] % 32 == 0
        assert max(it["img"].shape[1:]) == 64
    batch = collate_detection(items)
    H, W = batch["img"].shape[2:]
    # renormalised boxes point at the same pixels as before padding
    start = 0
    for it in items:
        n = len(it["cls"])
        h, w = it["img"].shape[1:]
        scale = torch.tensor([w, h, w, h], dtype=torch.float32)
        full = torch.tensor([W, H, W, H], dtype=torch.float32)
        torch.testing.assert_close(batch["bboxes"][start : start + n] * full, it["bboxes"] * scale)
        start += n


def test_collate_shapes_and_dtypes(cfg) -> None:
    ds = DetectionDataset(cfg.train, imgsz=64, augment=True, nc=cfg.nc)
    items = [ds[i] for i in range(3)]
    batch = collate_detection(items)
    n = sum(len(it["cls"]) for it in items)
    assert batch["img"].shape == (3, 3, 64, 64) and batch["img"].dtype == torch.uint8
    assert batch["batch_idx"].dtype == torch.int64 and batch["batch_idx"].shape == (n,)
    assert batch["batch_idx"].tolist() == sum(([k] * len(it["cls"]) for k, it in enumerate(items)), [])
    assert batch["cls"].dtype == torch.int64 and batch["cls"].shape == (n,)
    assert batch["bboxes"].dtype == torch.float32 and batch["bboxes"].shape == (n, 4)
    assert batch["im_file"] == [it["im_file"] for it in items]
    assert len(batch["ori_shape"]) == 3 and len(batch["ratio_pad"]) == 3
    with pytest.raises(ValueError):
        collate_detection([])


def _epoch_signature(loader) -> list[tuple[list[str], float]]:
    return [(b["im_file"], float(b["img"].float().sum()) + float(b["bboxes"].sum())) for b in loader]


def test_dataloader_workers_match_and_follow_epochs(cfg) -> None:
    runs = {}
    for workers in (0, 2):
        ds = DetectionDataset(cfg.train, imgsz=64, augment=True, nc=cfg.nc)
        loader = build_dataloader(ds, batch=3, workers=workers, shuffle=True, seed=5, pin_memory=False)
        assert (loader.num_workers > 0) == loader.persistent_workers
        epoch0 = _epoch_signature(loader)
        epoch1 = _epoch_signature(loader)  # nobody called set_epoch: the sampler advances it
        ds.close_mosaic()  # must reach persistent workers
        epoch2 = _epoch_signature(loader)
        ds.set_epoch(0)
        again0 = _epoch_signature(loader)
        runs[workers] = (epoch0, epoch1, epoch2, again0)
        assert sum(len(files) for files, _ in epoch0) == 8 and len(epoch0) == 3
        assert epoch0 != epoch1 and epoch1 != epoch2
        assert epoch0[0][0] != again0[0][0] or epoch0[0][1] != again0[0][1]  # mosaic now off
    assert runs[0] == runs[2]


def test_dataloader_unshuffled_order_and_bad_args(cfg) -> None:
    ds = DetectionDataset(cfg.val, imgsz=64, augment=False, nc=cfg.nc)
    loader = build_dataloader(ds, batch=2, workers=0, shuffle=False, seed=0)
    assert [f for b in loader for f in b["im_file"]] == ds.im_files
    with pytest.raises(ConfigError, match="batch"):
        build_dataloader(ds, batch=0, workers=0, shuffle=False, seed=0)


def test_dataset_bad_args(cfg, tmp_path: Path) -> None:
    with pytest.raises(ConfigError, match="imgsz"):
        DetectionDataset(cfg.val, imgsz=8, augment=False, nc=cfg.nc)
    with pytest.raises(DatasetError, match="empty dataset"):
        DetectionDataset([], imgsz=64, augment=False, nc=1)
    with pytest.raises(DatasetError, match="class id"):  # shapes labels use ids up to 5
        DetectionDataset(cfg.train, imgsz=64, augment=False, nc=1, cache_dir=tmp_path)
