"""Segment training augmentation beyond scale / place / flip: detection's random affine with the
polygons moved as points (the re-rasterised outline matches the warped pixels within a pixel),
mixup of two mosaics (both instance sets kept) and ``single_cls`` (every instance class 0), also
through the task's ``dataset`` / ``check_train_options``."""

from __future__ import annotations

from pathlib import Path
from types import SimpleNamespace

import numpy as np
import torch

from libreyolo._cv import cv2
from libreyolo.data.augment import AugmentConfig, affine_matrix
from libreyolo.data.segment import MASK_RATIO, SegmentDataset, rasterise, transform_polygons
from libreyolo.data.shapes_seg import polygon_line, render_instances

S = 64
STAR = np.array([[32, 8], [38, 26], [56, 26], [41, 37], [47, 56], [32, 44], [17, 56], [23, 37], [8, 26],
                 [26, 26]], np.float64)
HYP = AugmentConfig(degrees=30.0, translate=0.1, scale=0.0, shear=10.0)
PLAIN = {"hsv_h": 0.0, "hsv_s": 0.0, "hsv_v": 0.0, "fliplr": 0.0, "flipud": 0.0, "scale": (1.0, 1.0)}


def _within_a_pixel(a: np.ndarray, b: np.ndarray) -> None:
    """Every pixel where the two masks differ lies on the boundary of ``b`` (one-pixel band)."""
    k = np.ones((3, 3), np.uint8)
    band = cv2.dilate(b, k).astype(bool) & ~cv2.erode(b, k).astype(bool)
    diff = a.astype(bool) ^ b.astype(bool)
    assert not (diff & ~band).any(), int((diff & ~band).sum())
    assert (a.astype(bool) & b.astype(bool)).sum() / (a.astype(bool) | b.astype(bool)).sum() > 0.85


def test_a_polygon_moved_by_the_affine_fills_the_warped_mask() -> None:
    mask = rasterise([STAR], S)[0]
    for seed in range(5):
        M, gain = affine_matrix(np.random.default_rng(seed), in_shape=(S, S), out_shape=(S, S), hyp=HYP)
        assert gain == 1.0
        warped = cv2.warpAffine(mask, M[:2], (S, S), flags=cv2.INTER_NEAREST, borderValue=0)
        moved = rasterise(transform_polygons([STAR], M), S)[0]
        assert not np.array_equal(moved, mask)
        _within_a_pixel(warped, moved)


def _one_star(root: Path, cls: int = 1) -> list[Path]:
    """A 64 x 64 image: a white star (the one polygon of its label) on black."""
    (root / "images").mkdir(parents=True)
    (root / "labels").mkdir()
    img = np.zeros((S, S, 3), np.uint8)
    img[rasterise([STAR], S)[0] > 0] = 255
    f = root / "images" / "star.png"
    cv2.imwrite(str(f), img)
    (root / "labels" / "star.txt").write_text(polygon_line(cls, STAR, (S, S)) + "\n")
    return [f]


def test_affine_items_keep_the_mask_on_the_warped_pixels(tmp_path: Path) -> None:
    files = _one_star(tmp_path)
    warped = SegmentDataset(files, imgsz=S, nc=2, augment=True, degrees=30.0, translate=0.1, shear=10.0, **PLAIN)
    still = SegmentDataset(files, imgsz=S, nc=2, augment=True, **PLAIN)
    assert warped.affine and not still.affine
    for epoch in range(4):
        warped.set_epoch(epoch)
        it = warped[0]
        assert len(it["cls"]) == len(it["masks"]) == len(it["bboxes"]) == 1
        white = it["img"].numpy()[0] > 127  # the warped star, full resolution
        s4 = S // MASK_RATIO
        cells = (white.reshape(s4, MASK_RATIO, s4, MASK_RATIO).mean((1, 3)) >= 0.5).astype(np.uint8)
        _within_a_pixel(cells, it["masks"][0].numpy())
        ys, xs = np.nonzero(white)  # the box is the moved outline's, so it hugs the warped pixels
        box = it["bboxes"][0].numpy() * S
        assert abs(box[0] - (xs.min() + xs.max() + 1) / 2) <= 1.5 and abs(box[2] - (xs.max() + 1 - xs.min())) <= 2
        assert abs(box[1] - (ys.min() + ys.max() + 1) / 2) <= 1.5 and abs(box[3] - (ys.max() + 1 - ys.min())) <= 2
        assert not torch.equal(it["masks"], still[0]["masks"])


def _scenes(root: Path, n: int = 4) -> list[Path]:
    (root / "images").mkdir(parents=True)
    (root / "labels").mkdir()
    files = []
    for i in range(n):
        img, inst = render_instances(3, 0, i, imgsz=96)
        f = root / "images" / f"{i}.png"
        cv2.imwrite(str(f), img)
        (root / "labels" / f"{i}.txt").write_text("".join(polygon_line(c, p, img.shape[:2]) + "\n" for c, p in inst))
        files.append(f)
    return files


def test_mixup_keeps_the_first_mosaic_and_adds_the_seconds_instances(tmp_path: Path) -> None:
    files = _scenes(tmp_path)
    opts = {**PLAIN, "scale": (0.5, 1.5), "mosaic": 1.0}
    mixed = SegmentDataset(files, imgsz=S, nc=6, augment=True, mixup=1.0, **opts)
    alone = SegmentDataset(files, imgsz=S, nc=6, augment=True, **opts)
    for i in range(len(files)):
        a, b = alone[i], mixed[i]
        n = len(a["cls"])
        assert len(b["cls"]) > n and len(b["masks"]) == len(b["bboxes"]) == len(b["cls"])
        assert torch.equal(b["cls"][:n], a["cls"]) and torch.equal(b["masks"][:n], a["masks"])
        assert torch.allclose(b["bboxes"][:n], a["bboxes"])
        assert not torch.equal(a["img"], b["img"])  # blended with the second mosaic
    mixed.close_mosaic()  # mixup rides on mosaic: closed, an item is the plain one
    alone.close_mosaic()
    assert torch.equal(mixed[0]["img"], alone[0]["img"])


def test_single_cls_makes_every_instance_class_zero(tmp_path: Path) -> None:
    files = _scenes(tmp_path)
    many = SegmentDataset(files, imgsz=S, nc=6, augment=False)
    one = SegmentDataset(files, imgsz=S, nc=6, augment=False, single_cls=True)
    assert len({int(c) for i in range(len(files)) for c in many[i]["cls"]}) > 1
    for i in range(len(files)):
        a, b = many[i], one[i]
        assert torch.equal(b["cls"], torch.zeros_like(a["cls"])) and torch.equal(a["masks"], b["masks"])


def test_the_task_passes_affine_mixup_and_single_cls(tmp_path: Path) -> None:
    from libreyolo.tasks.segment import SegmentTask
    from libreyolo.training.config import TrainConfig

    files = _scenes(tmp_path, n=2)
    cfg = TrainConfig(single_cls=True, degrees=15.0, shear=2.0, mixup=0.5)
    task = SegmentTask()
    task.check_train_options(cfg)  # single_cls is accepted now
    config = SimpleNamespace(nc=6, coco={})
    train = task.dataset(config, files, split="train", imgsz=S, augment=True, train_cfg=cfg)
    assert train.single_cls and train.affine and train.hyp.degrees == 15.0 and train.hyp.mixup == 0.5
    assert train.hyp.translate == cfg.translate and train.hyp.scale == 0.0
    val = task.dataset(config, files, split="val", imgsz=S, train_cfg=cfg)
    assert val.single_cls and not val.augment
    assert all(int(c) == 0 for i in range(2) for c in train[i]["cls"])


def _wide_and_tall(root: Path) -> list[Path]:
    """Two wide images and one tall, each with one star."""
    (root / "images").mkdir(parents=True)
    (root / "labels").mkdir()
    files = []
    for k, (h, w) in enumerate([(48, 96), (96, 48), (40, 96)]):
        img = np.zeros((h, w, 3), np.uint8)
        poly = STAR * (min(h, w) / S)
        img[rasterise([poly], (h, w))[0] > 0] = 255
        f = root / "images" / f"{k}.png"
        cv2.imwrite(str(f), img)
        (root / "labels" / f"{k}.txt").write_text(polygon_line(k % 2, poly, (h, w)) + "\n")
        files.append(f)
    return files


def test_rect_items_are_aspect_sorted_rectangles_and_collate_pads(tmp_path: Path) -> None:
    from libreyolo.data.segment import collate_segment

    files = _wide_and_tall(tmp_path)
    ds = SegmentDataset(files, imgsz=S, nc=2, augment=False, rect=True, mosaic=1.0)
    assert [f.name for f in ds.files] == ["2.png", "0.png", "1.png"] and not ds.mosaic_enabled
    assert [ds.rect_shape(i) for i in range(3)] == [(32, 64), (32, 64), (64, 32)]
    for i in range(3):
        it = ds[i]
        H, W = ds.rect_shape(i)
        assert it["img"].shape == (3, H, W) and it["masks"].shape == (1, H // MASK_RATIO, W // MASK_RATIO)
        white = it["img"].numpy()[0] > 127
        cells = (white.reshape(H // 4, 4, W // 4, 4).mean((1, 3)) >= 0.5).astype(np.uint8)
        _within_a_pixel(cells, it["masks"][0].numpy())
        ys, xs = np.nonzero(white)
        cx, cy = it["bboxes"][0, 0] * W, it["bboxes"][0, 1] * H  # normalised by the item's own W, H
        assert abs(float(cx) - (xs.min() + xs.max() + 1) / 2) <= 1.5 and abs(float(cy) - (ys.min() + ys.max() + 1) / 2) <= 1.5
    batch = collate_segment([ds[1], ds[2]])  # a wide and a tall item: padded to 64 x 64
    assert batch["img"].shape == (2, 3, 64, 64) and batch["masks"].shape == (2, 16, 16)
    assert torch.equal(batch["masks"][0, :8], ds[1]["masks"][0]) and not batch["masks"][0, 8:].any()
    assert torch.allclose(batch["bboxes"][0, :2] * 64, ds[1]["bboxes"][0, :2] * torch.tensor([64.0, 32.0]))
    assert int(batch["img"][0, 0, 40, 10]) == 114
    assert ds.set_batch_shapes(2).tolist() == [[32, 64], [32, 64], [64, 32]]
    assert ds[0]["img"].shape == (3, 32, 64)
    train = SegmentDataset(files, imgsz=S, nc=2, augment=True, rect=True, degrees=10.0, translate=0.1, **PLAIN)
    train.set_batch_shapes(3)  # one batch: every item on the 64 x 64 union
    for i in range(3):
        it = train[i]
        assert it["img"].shape == (3, 64, 64) and len(it["masks"]) == len(it["cls"]) == 1


def test_rect_training_runs_through_the_trainer(tmp_path: Path) -> None:
    from libreyolo.model import Model
    from libreyolo.registry import families

    files = _wide_and_tall(tmp_path / "d")
    (tmp_path / "d" / "data.yaml").write_text(f"path: {tmp_path / 'd'}\ntrain: images\nval: images\nnames: [a, b]\n")
    torch.manual_seed(0)
    model = Model(families()["yolo9_seg"](size="t", nc=2))
    out = model.train(data=str(tmp_path / "d" / "data.yaml"), epochs=1, imgsz=S, batch=2, workers=0, device="cpu",
                      rect=True, single_cls=True, lr0=1e-3, project=str(tmp_path / "runs"), plots=False,
                      verbose=False, tensorboard=False)
    assert model.nc == 1 and Path(out["best"]).is_file() and len(files) == 3
    assert 0.0 <= out["mask_mAP50-95"] <= 1.0
