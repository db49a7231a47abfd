"""The semantic data path: the shapes-sem generator, the mask checks (one-line errors naming the
file), the dataset items and the yaml."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest
import torch

from libreyolo._cv import cv2
from libreyolo.data.semantic import (
    IGNORE,
    SemanticDataset,
    collate_semantic,
    load_semantic_data,
    mask_path,
)
from libreyolo.data.shapes import GENERATOR_VERSION, render_scene
from libreyolo.data.shapes_sem import SEM_NAMES, ensure_shapes_sem_dataset, render_semantic
from libreyolo.errors import DatasetError


def _tree(tmp: Path, masks: dict[str, np.ndarray], *, nc: int = 3, ignore: int = 255, size: tuple[int, int] = (20, 30),
          extra: str = "") -> Path:
    for split in ("train", "val"):
        (tmp / "images" / split).mkdir(parents=True, exist_ok=True)
        (tmp / "masks" / split).mkdir(parents=True, exist_ok=True)
        for stem, m in masks.items():
            cv2.imwrite(str(tmp / "images" / split / f"{stem}.jpg"), np.full((*size, 3), 90, np.uint8))
            if m is not None:
                cv2.imwrite(str(tmp / "masks" / split / f"{stem}.png"), m)
    names = "".join(f"  - c{i}\n" for i in range(nc))
    (tmp / "data.yaml").write_text(f"train: images/train\nval: images/val\nignore_index: {ignore}\n{extra}names:\n{names}")
    return tmp / "data.yaml"


def test_generator_is_deterministic_and_masks_are_the_drawn_pixels(tmp_path: Path) -> None:
    a, b = (ensure_shapes_sem_dataset(tmp_path / d, n_train=3, n_val=2, imgsz=64) for d in ("x", "y"))
    for rel in ("images/train/train_000001.jpg", "masks/val/val_000001.png"):
        assert (a.parent / rel).read_bytes() == (b.parent / rel).read_bytes()
    img, mask = render_semantic(0, 0, 1, imgsz=64)
    rng = np.random.default_rng([0, 0, 1, GENERATOR_VERSION, 29])  # the scene's own draws, without the mask
    rng.uniform(0.6, 1.0), rng.random()
    img2, labels = render_scene(rng, height=img.shape[0], width=img.shape[1])
    assert np.array_equal(img, img2)  # asking for the mask does not change the scene
    assert set(np.unique(mask[mask > 0]).tolist()) == {int(c) + 1 for c in labels[:, 0]}
    for c in np.unique(mask[mask > 0]):  # every class pixel lies in a box of that class
        inside = np.zeros(mask.shape, bool)
        for _, x1, y1, x2, y2 in labels[labels[:, 0] == c - 1]:
            inside[int(y1):int(y2), int(x1):int(x2)] = True
        assert inside[mask == c].all()
    assert set(np.unique(mask)) <= set(range(len(SEM_NAMES))) and (mask > 0).any() and (mask == 0).any()
    cfg = load_semantic_data(a)
    assert cfg.nc == 7 and cfg.names[1] == "circle" and cfg.ignore_index == 255 and len(cfg.val) == 2


def test_items_letterbox_like_prediction_and_training_is_seeded(tmp_path: Path) -> None:
    m = np.zeros((20, 30), np.uint8)
    m[:, 15:] = 2
    m[0, 0] = 255
    cfg = load_semantic_data(_tree(tmp_path, {"a": m}))
    val = SemanticDataset(cfg.val, imgsz=32, nc=cfg.nc, ignore_index=cfg.ignore_index)
    it = val[0]
    assert it["img"].shape == (3, 32, 32) and it["img"].dtype == torch.uint8 and it["mask"].shape == (32, 32)
    ratio, (left, top) = it["ratio_pad"]
    assert ratio == pytest.approx(32 / 30) and left == 0.0 and top == 5.0  # 30x20 -> 32x21, 5 rows on top
    assert (it["mask"][:5] == IGNORE).all() and (it["mask"][-6:] == IGNORE).all()  # padding is not scored
    assert int(it["mask"][10, 31]) == 2 and int(it["ori_mask"][0, 0]) == IGNORE and it["ori_shape"] == (20, 30)
    train = SemanticDataset(cfg.train, imgsz=32, nc=cfg.nc, augment=True)
    train.set_seed(3)
    first, again = train[0], train[0]
    assert torch.equal(first["img"], again["img"]) and torch.equal(first["mask"], again["mask"])
    assert set(torch.unique(first["mask"]).tolist()) <= {IGNORE, 0, 2}
    batch = collate_semantic([train[0], train[0]])
    assert batch["img"].shape == (2, 3, 32, 32) and batch["mask"].dtype == torch.int64


@pytest.mark.parametrize("bad,message", [
    (np.full((20, 30), 5, np.uint8), "holds value 5 on 600 pixels"),
    (np.zeros((10, 30), np.uint8), "is 30x10 but its image is 30x20"),
    (np.zeros((20, 30, 3), np.uint8), "single-channel"),
    (None, "is missing"),
])
def test_a_bad_mask_gives_a_one_line_error_naming_the_file(tmp_path: Path, bad, message: str) -> None:
    good = np.zeros((20, 30), np.uint8)
    cfg = load_semantic_data(_tree(tmp_path, {"a": good, "b": bad}))
    with pytest.raises(DatasetError) as e:
        SemanticDataset(cfg.train, imgsz=32, nc=cfg.nc, ignore_index=cfg.ignore_index, prefix="train: ")
    text = str(e.value)
    assert "\n" not in text and message in text and text.startswith("train: mask ")
    assert str(tmp_path / "masks" / "train" / "b.png") in text


def test_yaml_errors(tmp_path: Path) -> None:
    with pytest.raises(DatasetError, match="'ignore_index' must be an int >= nc"):
        load_semantic_data(_tree(tmp_path / "a", {"a": np.zeros((20, 30), np.uint8)}, ignore=1))
    with pytest.raises(DatasetError, match="not under an 'images' folder"):
        mask_path(Path("/d/pictures/a.jpg"))
    with pytest.raises(DatasetError, match="not found"):
        load_semantic_data(str(tmp_path / "nope.yaml"))


def test_a_dataset_of_another_task_is_named() -> None:
    from libreyolo.data.config import load_data_config

    with pytest.raises(DatasetError, match="'shapes' is a detection dataset; a semantic-segmentation model"):
        load_semantic_data("shapes")
    with pytest.raises(DatasetError, match="'shapes-sem' is a semantic-segmentation dataset"):
        load_data_config("shapes-sem")
