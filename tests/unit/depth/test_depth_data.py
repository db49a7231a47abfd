"""Depth datasets (issue 23): the one-line errors for missing, mismatched and wrongly typed depth
files, the .npy and 16-bit PNG readers, and the shapes-depth generator (byte-identical, depth
order consistent with the drawing)."""

from __future__ import annotations

import hashlib
from pathlib import Path

import numpy as np
import pytest
import torch

from libreyolo._cv import cv2
from libreyolo.data.depth import DepthDataset, collate_depth, load_depth_data, read_depth
from libreyolo.data.shapes_depth import (
    FAR_BOTTOM,
    FAR_TOP,
    ensure_shapes_depth_dataset,
    render_depth,
)
from libreyolo.errors import DatasetError


def _dataset(root: Path, depth: np.ndarray | None, *, suffix: str = ".png", img_hw: tuple[int, int] = (20, 30),
             extra: str = "") -> Path:
    (root / "images" / "train").mkdir(parents=True)
    (root / "depth" / "train").mkdir(parents=True)
    cv2.imwrite(str(root / "images" / "train" / "a.jpg"), np.full((*img_hw, 3), 90, np.uint8))
    if depth is not None:
        f = root / "depth" / "train" / f"a{suffix}"
        np.save(f, depth) if suffix == ".npy" else cv2.imwrite(str(f), depth)
    (root / "data.yaml").write_text(f"train: images/train\nval: images/train\n{extra}")
    return root / "data.yaml"


def _build(yaml_path: Path) -> DepthDataset:
    cfg = load_depth_data(yaml_path)
    return DepthDataset(cfg.train, imgsz=28, depth_scale=cfg.depth_scale, max_depth=cfg.max_depth)


def test_missing_depth_file_is_named(tmp_path: Path) -> None:
    with pytest.raises(DatasetError, match=r"depth map .*a\.png \(or \.npy\) is missing"):
        _build(_dataset(tmp_path, None))


def test_size_mismatch_is_named(tmp_path: Path) -> None:
    with pytest.raises(DatasetError, match=r"a\.png is 31x20 but its image is 30x20"):
        _build(_dataset(tmp_path, np.ones((20, 31), np.uint16)))


@pytest.mark.parametrize("arr,suffix,what", [(np.ones((20, 30), np.uint8), ".png", "16-bit PNG"),
                                             (np.ones((20, 30, 3), np.uint16), ".png", "16-bit PNG"),
                                             (np.ones((20, 30), np.int32), ".npy", "float32/float64 or uint16"),
                                             (np.ones((1, 20, 30), np.float32), ".npy", "2-D")])
def test_wrong_dtype_or_shape_is_named(tmp_path: Path, arr: np.ndarray, suffix: str, what: str) -> None:
    with pytest.raises(DatasetError, match=rf"a\{suffix} has shape .* dtype .*{what}"):
        _build(_dataset(tmp_path, arr, suffix=suffix))


def test_yaml_errors(tmp_path: Path) -> None:
    y = _dataset(tmp_path, np.ones((20, 30), np.uint16), extra="depth_scale: -2\n")
    with pytest.raises(DatasetError, match="'depth_scale' must be a positive number"):
        load_depth_data(y)
    y.write_text("train: images/train\n")
    with pytest.raises(DatasetError, match="missing key 'val'"):
        load_depth_data(y)
    with pytest.raises(DatasetError, match="'shapes-sem' is no depth dataset"):
        load_depth_data("shapes-sem")


def test_png_scale_npy_values_and_missing_pixels(tmp_path: Path) -> None:
    mm = np.full((20, 30), 1500, np.uint16)
    mm[0, 0], mm[0, 1] = 0, 9000  # no depth; beyond max_depth
    y = _dataset(tmp_path / "png", mm, extra="depth_scale: 1000\nmax_depth: 5\n")
    item = _build(y)[0]
    d = item["ori_depth"]
    assert d.dtype == torch.float32 and float(d[5, 5]) == 1.5 and float(d[0, 0]) == 0.0 and float(d[0, 1]) == 0.0
    assert item["depth"].shape == (28, 28) and float(item["depth"][0, 0]) == 0.0  # letterbox padding: no depth
    f = np.full((20, 30), 2.25, np.float32)
    f[3, 3] = np.nan
    out = read_depth(_dataset(tmp_path / "npy", f, suffix=".npy").parent / "depth" / "train" / "a.npy")
    assert float(out[0, 0]) == 2.25 and float(out[3, 3]) == 0.0


def test_training_items_are_a_function_of_seed_epoch_index(tmp_path: Path) -> None:
    y = ensure_shapes_depth_dataset(tmp_path, n_train=2, n_val=1, imgsz=64)
    cfg = load_depth_data(y)
    ds = DepthDataset(cfg.train, imgsz=42, depth_scale=cfg.depth_scale, augment=True)
    a, b = ds[1], ds[1]
    assert torch.equal(a["img"], b["img"]) and torch.equal(a["depth"], b["depth"])
    ds.set_epoch(1)
    assert not torch.equal(ds[1]["img"], a["img"])
    batch = collate_depth([ds[0], ds[1]])
    assert batch["img"].shape == (2, 3, 42, 42) and batch["depth"].shape == (2, 42, 42)
    valid = batch["depth"][batch["depth"] > 0]
    assert float(valid.min()) >= 2.0 and float(valid.max()) <= 12.0  # nearest resampling: stored values only


def _digest(folder: Path) -> str:
    h = hashlib.sha256()
    for f in sorted(p for p in folder.rglob("*") if p.is_file() and p.name != "data.yaml"):
        h.update(f.relative_to(folder).as_posix().encode() + f.read_bytes())
    return h.hexdigest()


def test_shapes_depth_is_byte_identical_and_ordered(tmp_path: Path) -> None:
    a = ensure_shapes_depth_dataset(tmp_path / "a", n_train=3, n_val=1, imgsz=64).parent
    b = ensure_shapes_depth_dataset(tmp_path / "b", n_train=3, n_val=1, imgsz=64).parent
    assert a.name == b.name and _digest(a) == _digest(b)
    assert _digest(a) != _digest(ensure_shapes_depth_dataset(tmp_path / "c", n_train=3, n_val=1, imgsz=64,
                                                             seed=1).parent)
    img, depth = render_depth(0, 0, 2, imgsz=64)
    stored = cv2.imread(str(a / "depth" / "train" / "train_000002.png"), cv2.IMREAD_UNCHANGED)
    assert stored.dtype == np.uint16 and np.array_equal(stored, np.round(depth * 1000).astype(np.uint16))
    # the background is the tilted far plane; the shapes are nearer than any background pixel
    bg = depth >= FAR_BOTTOM - 1e-4
    rows = np.linspace(FAR_TOP, FAR_BOTTOM, depth.shape[0], dtype=np.float32)
    assert np.allclose(depth[bg], np.broadcast_to(rows[:, None], depth.shape)[bg], atol=1e-4)
    assert (~bg).any() and float(depth[~bg].max()) <= 8.0


def test_a_detection_model_refuses_shapes_depth() -> None:
    from libreyolo.data.config import load_data_config

    with pytest.raises(DatasetError, match="'shapes-depth' is a depth dataset"):
        load_data_config("shapes-depth")
