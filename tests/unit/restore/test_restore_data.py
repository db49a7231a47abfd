"""Restoration data: the paired-folder layout and its one-line errors, the shapes-denoise /
shapes-sr demos (byte-identical on every run), and the dataset items."""

from __future__ import annotations

import hashlib
from pathlib import Path

import numpy as np
import pytest
import torch

from libreyolo._cv import cv2
from libreyolo.data.restore import RestoreDataset, collate_restore, load_restore_data
from libreyolo.data.shapes_restore import ensure_shapes_restore_dataset, render_pair
from libreyolo.errors import DatasetError


def _write_pair_set(root: Path, *, lq_hw: tuple[int, int], hq_hw: tuple[int, int], scale: int,
                    drop_hq: bool = False) -> Path:
    for side, (h, w) in (("lq", lq_hw), ("hq", hq_hw)):
        (root / side / "train").mkdir(parents=True)
        (root / side / "val").mkdir(parents=True)
        for split in ("train", "val"):
            if side == "hq" and drop_hq and split == "train":
                continue
            cv2.imwrite(str(root / side / split / "a.png"), np.full((h, w, 3), 100, np.uint8))
    (root / "data.yaml").write_text(f"train: lq/train\nval: lq/val\nscale: {scale}\n")
    return root / "data.yaml"


def test_missing_hq_and_size_mismatch_are_one_line_errors(tmp_path: Path) -> None:
    cfg = load_restore_data(_write_pair_set(tmp_path / "a", lq_hw=(16, 16), hq_hw=(16, 16), scale=1, drop_hq=True))
    with pytest.raises(DatasetError, match=r"HQ image .*hq/train/a.png is missing") as e:
        RestoreDataset(cfg.train, imgsz=16, scale=cfg.scale)
    assert "\n" not in str(e.value)
    cfg = load_restore_data(_write_pair_set(tmp_path / "b", lq_hw=(16, 20), hq_hw=(32, 40), scale=4))
    with pytest.raises(DatasetError, match=r"is 40x32 but its LQ image .* is 20x16; with scale=4 .* 80x64") as e:
        RestoreDataset(cfg.train, imgsz=16, scale=cfg.scale)
    assert "\n" not in str(e.value)
    (tmp_path / "c").mkdir()
    (tmp_path / "c" / "data.yaml").write_text("train: lq/train\nval: lq/val\nscale: 0\n")
    with pytest.raises(DatasetError, match="'scale' must be a positive int"):
        load_restore_data(tmp_path / "c")
    with pytest.raises(DatasetError, match="not found"):
        load_restore_data(tmp_path / "nowhere.yaml")


def _digest(folder: Path) -> str:
    h = hashlib.sha256()
    for f in sorted(folder.rglob("*.png")):
        h.update(f.relative_to(folder).as_posix().encode() + f.read_bytes())
    return h.hexdigest()


def test_demo_sets_are_byte_identical_and_degraded_as_documented(tmp_path: Path) -> None:
    a = ensure_shapes_restore_dataset(tmp_path / "1", kind="denoise", n_train=2, n_val=1, imgsz=32)
    b = ensure_shapes_restore_dataset(tmp_path / "2", kind="denoise", n_train=2, n_val=1, imgsz=32)
    assert _digest(a.parent) == _digest(b.parent)
    assert a.parent.name == b.parent.name  # the folder name is the content's key
    lq, hq = render_pair(0, 0, 0, imgsz=32, kind="denoise", sigma=25.0)
    noise = lq.astype(np.float64) - hq
    assert 15 < noise.std() < 30 and lq.shape == hq.shape  # clipping at 0 / 255 shrinks it a little
    sr = ensure_shapes_restore_dataset(tmp_path / "3", kind="sr", n_train=2, n_val=1, imgsz=64)
    cfg = load_restore_data(sr)
    lq_img, hq_img = cv2.imread(str(cfg.train[0][0])), cv2.imread(str(cfg.train[0][1]))
    assert cfg.scale == 4 and lq_img.shape == (16, 16, 3) and hq_img.shape == (64, 64, 3)
    # bicubic downscale: close to the 4x4 block means of the HQ image
    blocks = hq_img.reshape(16, 4, 16, 4, 3).mean(axis=(1, 3))
    assert np.abs(lq_img.astype(np.float64) - blocks).mean() < 12


def test_items_crop_aligned_patches_deterministically(tmp_path: Path) -> None:
    cfg = load_restore_data(ensure_shapes_restore_dataset(tmp_path, kind="sr", n_train=2, n_val=1, imgsz=64))
    ds = RestoreDataset(cfg.train, imgsz=8, scale=4, augment=True)
    ds.set_seed(3)
    ds.set_epoch(1)
    it = ds[0]
    assert it["img"].shape == (3, 8, 8) and it["target"].shape == (3, 32, 32) and it["img"].dtype == torch.uint8
    again = ds[0]
    assert torch.equal(it["img"], again["img"]) and torch.equal(it["target"], again["target"])
    # the LQ patch is the bicubic reduction of the HQ patch: a 4x4 mean is close to it
    mean = it["target"].float().reshape(3, 8, 4, 8, 4).mean((2, 4))
    assert float((mean - it["img"].float()).abs().mean()) < 15
    val = RestoreDataset(cfg.val, imgsz=32, scale=4)  # larger than the 16 px image: edge-padded
    v = val[0]
    assert v["valid"] == (16, 16) and v["img"].shape == (3, 32, 32) and v["target"].shape == (3, 128, 128)
    assert torch.equal(v["img"][:, 16:, :], v["img"][:, 15:16, :].expand(3, 16, 32))
    batch = collate_restore([v, v])
    assert batch["img"].shape == (2, 3, 32, 32) and batch["valid"] == [(16, 16), (16, 16)]
