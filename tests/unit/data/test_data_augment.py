"""Augmentation keeps boxes on their pixels: a box is painted in a unique colour, transformed,
and the painted pixels are compared with the transformed box."""

from __future__ import annotations

from pathlib import Path

import cv2
import numpy as np
import pytest

from libreyolo.data.augment import (
    AugmentConfig,
    flip,
    hsv_jitter,
    letterbox_image,
    mosaic4,
    random_affine,
)
from libreyolo.errors import ConfigError

BG = 100
COLOURS = [(255, 0, 255), (0, 255, 255), (255, 255, 0), (0, 0, 255)]
NO_AUG = dict(mosaic=0.0, translate=0.0, scale=0.0, fliplr=0.0, hsv_h=0.0, hsv_s=0.0, hsv_v=0.0)


def _painted(h: int, w: int, box: tuple[int, int, int, int], colour=COLOURS[0]) -> np.ndarray:
    img = np.full((h, w, 3), BG, np.uint8)
    x1, y1, x2, y2 = box
    img[y1:y2, x1:x2] = colour
    return img


def _mask(img: np.ndarray, colour) -> np.ndarray:
    """Pixels at least half-way from the grey background to ``colour``."""
    p = img.astype(np.float64)
    return ((p - colour) ** 2).sum(-1) < ((p - BG) ** 2).sum(-1)


def _bbox(mask: np.ndarray) -> np.ndarray | None:
    ys, xs = np.nonzero(mask)
    if len(xs) == 0:
        return None
    return np.array([xs.min(), ys.min(), xs.max() + 1, ys.max() + 1], np.float64)


def _assert_box_matches(img: np.ndarray, box: np.ndarray, colour, tol: float) -> None:
    found = _bbox(_mask(img, colour))
    assert found is not None, "painted pixels vanished while the box was kept"
    np.testing.assert_allclose(found, box, atol=tol)


def test_letterbox_box_consistent() -> None:
    img = _painted(60, 100, (10, 20, 40, 50))
    out, boxes, ratio, pad = letterbox_image(img, np.array([[10.0, 20, 40, 50]]), (128, 128))
    assert out.shape == (128, 128, 3) and out.dtype == np.uint8
    assert ratio == pytest.approx(1.28) and pad == (0.0, 25.0)
    assert (out[:25] == 114).all() and (out[-25:] == 114).all()
    _assert_box_matches(out, boxes[0], COLOURS[0], tol=1.0)


@pytest.mark.parametrize("horizontal", [True, False])
def test_flip_exact(horizontal: bool) -> None:
    img = _painted(40, 50, (3, 5, 20, 12))
    out, boxes = flip(img, np.array([[3.0, 5, 20, 12]]), horizontal=horizontal)
    _assert_box_matches(out, boxes[0], COLOURS[0], tol=0.0)
    expected = [30, 5, 47, 12] if horizontal else [3, 28, 20, 35]
    np.testing.assert_allclose(boxes[0], expected)


@pytest.mark.parametrize("seed", range(6))
def test_affine_without_rotation_is_tight(seed: int) -> None:
    img = _painted(96, 96, (20, 30, 60, 70))
    hyp = AugmentConfig(translate=0.25, scale=0.5, degrees=0.0, shear=0.0)
    out, boxes, cls = random_affine(img, np.array([[20.0, 30, 60, 70]]), np.array([3]),
                                    np.random.default_rng(seed), out_shape=(80, 112), hyp=hyp)
    assert out.shape == (80, 112, 3)
    if len(boxes):
        assert cls.tolist() == [3]
        _assert_box_matches(out, boxes[0], COLOURS[0], tol=1.5)
    else:  # dropped only when (almost) nothing of it is left in the output
        assert _mask(out, COLOURS[0]).sum() < 0.1 * 40 * 40


@pytest.mark.parametrize("seed", range(4))
def test_affine_with_rotation_and_shear_contains_pixels(seed: int) -> None:
    img = _painted(96, 96, (25, 30, 70, 60))
    hyp = AugmentConfig(translate=0.1, scale=0.3, degrees=30.0, shear=10.0)
    out, boxes, _ = random_affine(img, np.array([[25.0, 30, 70, 60]]), np.array([0]),
                                  np.random.default_rng(seed), out_shape=(96, 96), hyp=hyp)
    assert len(boxes) == 1
    ys, xs = np.nonzero(_mask(out, COLOURS[0]))
    x1, y1, x2, y2 = boxes[0]
    assert (xs >= x1 - 1).all() and (xs + 1 <= x2 + 1).all()
    assert (ys >= y1 - 1).all() and (ys + 1 <= y2 + 1).all()


def test_degenerate_boxes_dropped() -> None:
    img = _painted(100, 100, (0, 0, 3, 100))
    hyp = AugmentConfig(translate=0.0, scale=0.0)
    # a 3-px-wide box shrunk to 1.5 px by the output size halving is dropped
    out, boxes, cls = random_affine(img, np.array([[0.0, 0, 3, 100], [40, 40, 80, 80]]), np.array([0, 1]),
                                    np.random.default_rng(0), out_shape=(100, 100), hyp=hyp)
    assert cls.tolist() == [0, 1]  # identity transform keeps both
    hyp = AugmentConfig(translate=0.0, scale=0.0, min_box_px=4.0)
    _, boxes, cls = random_affine(img, np.array([[0.0, 0, 3, 100], [40, 40, 80, 80]]), np.array([0, 1]),
                                  np.random.default_rng(0), out_shape=(100, 100), hyp=hyp)
    assert cls.tolist() == [1]
    np.testing.assert_allclose(boxes[0], [40, 40, 80, 80], atol=1e-6)


@pytest.mark.parametrize("seed", range(4))
def test_mosaic_then_affine_box_consistent(seed: int) -> None:
    rng = np.random.default_rng(seed)
    images, boxes, classes = [], [], []
    for k in range(4):
        h, w = (64, 48) if k % 2 else (48, 64)
        b = (8 + 2 * k, 10, 30 + 2 * k, 36)
        images.append(_painted(h, w, b, COLOURS[k]))
        boxes.append(np.array([b], np.float64))
        classes.append(np.array([k]))
    canvas, mb, mc = mosaic4(images, boxes, classes, rng, size=64)
    assert canvas.shape == (128, 128, 3)
    for b, c in zip(mb, mc, strict=True):
        _assert_box_matches(canvas, b, COLOURS[int(c)], tol=0.0)
    hyp = AugmentConfig(translate=0.1, scale=0.3)
    out, ab, ac = random_affine(canvas, mb, mc, rng, out_shape=(64, 64), hyp=hyp)
    for b, c in zip(ab, ac, strict=True):
        _assert_box_matches(out, b, COLOURS[int(c)], tol=1.5)
    for k in set(range(4)) - {int(c) for c in ac}:
        assert _mask(out, COLOURS[k]).sum() < 40, f"image {k} visible but its box was dropped"


def test_dataset_pipeline_box_consistent(tmp_path: Path) -> None:
    """End to end through DetectionDataset (mosaic + affine + flips), PNG to avoid JPEG bleed."""
    from libreyolo.data.dataset import DetectionDataset

    rng = np.random.default_rng(0)
    files = []
    for i in range(4):
        h, w = int(rng.integers(50, 90)), int(rng.integers(50, 90))
        x1, y1 = int(rng.integers(2, w // 2)), int(rng.integers(2, h // 2))
        x2, y2 = x1 + int(rng.integers(12, w // 2)), y1 + int(rng.integers(12, h // 2))
        f = tmp_path / "images" / "train" / f"{i}.png"
        f.parent.mkdir(parents=True, exist_ok=True)
        cv2.imwrite(str(f), cv2.cvtColor(_painted(h, w, (x1, y1, x2, y2), COLOURS[i]), cv2.COLOR_RGB2BGR))
        lab = tmp_path / "labels" / "train" / f"{i}.txt"
        lab.parent.mkdir(parents=True, exist_ok=True)
        lab.write_text(f"{i} {(x1 + x2) / 2 / w} {(y1 + y2) / 2 / h} {(x2 - x1) / w} {(y2 - y1) / h}\n")
        files.append(f)
    hyp = AugmentConfig(hsv_h=0.0, hsv_s=0.0, hsv_v=0.0, translate=0.1, scale=0.3, fliplr=0.5, flipud=0.5)
    ds = DetectionDataset(files, imgsz=64, augment=True, hyp=hyp, nc=4)
    checked = 0
    for epoch in range(3):
        ds.set_epoch(epoch)
        for i in range(len(ds)):
            it = ds[i]
            img = it["img"].permute(1, 2, 0).numpy()
            assert img.shape == (64, 64, 3)
            covered = np.zeros((64, 64, 4), bool)
            for (cx, cy, bw, bh), c in zip(it["bboxes"].numpy(), it["cls"].numpy(), strict=True):
                box = np.array([cx - bw / 2, cy - bh / 2, cx + bw / 2, cy + bh / 2]) * 64
                # a mosaic may hold the same image twice: look at this box's neighbourhood only
                x1, y1 = (max(int(v) - 3, 0) for v in box[:2])
                x2, y2 = (int(np.ceil(v)) + 3 for v in box[2:])
                near = np.zeros((64, 64), bool)
                near[y1:y2, x1:x2] = True
                found = _bbox(_mask(img, COLOURS[int(c)]) & near)
                assert found is not None
                np.testing.assert_allclose(found, box, atol=2.0)
                covered[..., int(c)] |= near
                checked += 1
            for k in range(4):  # no substantial painted region left without a box
                rest = _mask(img, COLOURS[k]) & ~covered[..., k]
                rb = _bbox(rest)
                assert rb is None or rest.sum() < 60 or min(rb[2] - rb[0], rb[3] - rb[1]) <= 4
    assert checked >= 12


def test_hsv_changes_colour_not_geometry_and_is_seeded() -> None:
    img = _painted(32, 32, (8, 8, 24, 24), (200, 60, 40))
    a = hsv_jitter(img, np.random.default_rng(1), h=0.5, s=0.7, v=0.4)
    b = hsv_jitter(img, np.random.default_rng(1), h=0.5, s=0.7, v=0.4)
    assert np.array_equal(a, b) and not np.array_equal(a, img)
    inner = a[8:24, 8:24].reshape(-1, 3)
    assert (inner == inner[0]).all() and not np.array_equal(inner[0], a[0, 0])
    assert hsv_jitter(img, np.random.default_rng(1), h=0.0, s=0.0, v=0.0) is img


def test_augment_config_validation() -> None:
    assert AugmentConfig().mosaic == 1.0 and AugmentConfig().close_mosaic == 10
    with pytest.raises(ConfigError, match="fliplr"):
        AugmentConfig(fliplr=1.5)
    with pytest.raises(ConfigError, match="scale"):
        AugmentConfig(scale=1.0)
    with pytest.raises(ConfigError, match="Did you mean 'mosaic'"):
        AugmentConfig.from_dict({"mosiac": 0.5})
    assert AugmentConfig.from_dict({"degrees": 5.0}).degrees == 5.0
    with pytest.raises(TypeError):
        AugmentConfig(0.5)  # keyword-only


def test_mixup_blends_a_second_mosaic_and_keeps_both_box_sets(tiny_shapes: Path) -> None:
    """With flips and colour jitter off, a MixUp item starts from the very mosaic the plain item
    is (same seed): its boxes are those boxes followed by the second mosaic's, its pixels a blend."""
    from libreyolo.data.config import load_data_config
    from libreyolo.data.dataset import DetectionDataset

    d = load_data_config(tiny_shapes)
    quiet = dict(hsv_h=0.0, hsv_s=0.0, hsv_v=0.0, fliplr=0.0, flipud=0.0, mosaic=1.0)
    plain = DetectionDataset(d.train, imgsz=64, augment=True, hyp=AugmentConfig(**quiet), nc=d.nc)
    mixed = DetectionDataset(d.train, imgsz=64, augment=True, hyp=AugmentConfig(**quiet, mixup=1.0), nc=d.nc)
    grew = 0
    for i in range(len(plain)):
        a, b = plain[i], mixed[i]
        n = len(a["cls"])
        assert len(b["cls"]) >= n
        assert np.array_equal(b["cls"][:n].numpy(), a["cls"].numpy())
        np.testing.assert_allclose(b["bboxes"][:n].numpy(), a["bboxes"].numpy(), atol=1e-6)
        assert not np.array_equal(a["img"].numpy(), b["img"].numpy())  # blended with another mosaic
        grew += len(b["cls"]) > n
    assert grew >= len(plain) // 2
    nomix = DetectionDataset(d.train, imgsz=64, augment=True, hyp=AugmentConfig(**quiet, mixup=0.0), nc=d.nc)
    assert np.array_equal(nomix[0]["img"].numpy(), plain[0]["img"].numpy())  # mixup=0 changes nothing
    with pytest.raises(ConfigError, match="mixup"):
        AugmentConfig(mixup=1.5)


def test_ram_cache_gives_the_same_items_without_reading_files(tiny_shapes: Path, monkeypatch) -> None:
    from libreyolo.data.config import load_data_config
    from libreyolo.data.dataset import DetectionDataset

    d = load_data_config(tiny_shapes)
    plain = DetectionDataset(d.train, imgsz=64, augment=True, nc=d.nc)
    cached = DetectionDataset(d.train, imgsz=64, augment=True, nc=d.nc, cache=True)
    assert cached._ram is not None and len(cached._ram) == len(plain)
    want = {}
    for epoch in (0, 1):
        plain.set_epoch(epoch)
        want.update({(epoch, i): plain[i] for i in range(len(plain))})

    def no_reads(self, i):
        raise AssertionError("a cached dataset read an image file")

    monkeypatch.setattr(DetectionDataset, "_read", no_reads)
    for epoch in (0, 1):
        cached.set_epoch(epoch)
        for i in range(len(cached)):
            got, ref = cached[i], want[(epoch, i)]
            assert np.array_equal(got["img"].numpy(), ref["img"].numpy())
            assert np.array_equal(got["bboxes"].numpy(), ref["bboxes"].numpy())
    with pytest.raises(ConfigError, match="cache must be"):
        DetectionDataset(d.train, imgsz=64, augment=True, nc=d.nc, cache="disk")


def test_auto_cache_keeps_a_small_dataset_in_memory_and_skips_a_large_one_quietly(
        tiny_shapes: Path, monkeypatch, caplog) -> None:
    """``cache="auto"`` (the trainer's default) caches what fits in ``AUTO_CACHE_BYTES`` and a
    quarter of the free memory; above that it reads from disk without a warning."""
    import logging

    from libreyolo.data import dataset as dsmod
    from libreyolo.data.config import load_data_config
    from libreyolo.data.dataset import DetectionDataset
    from libreyolo.training.config import TrainConfig

    assert TrainConfig().cache == "auto"
    d = load_data_config(tiny_shapes)
    small = DetectionDataset(d.train, imgsz=64, augment=True, nc=d.nc, cache="auto")
    assert small._ram is not None and len(small._ram) == len(small)
    monkeypatch.setattr(dsmod, "AUTO_CACHE_BYTES", 1000)  # smaller than one 64 px image
    with caplog.at_level(logging.WARNING, logger="libreyolo.data.dataset"):
        large = DetectionDataset(d.train, imgsz=64, augment=True, nc=d.nc, cache="auto")
    assert large._ram is None and not caplog.records
    monkeypatch.setattr(dsmod, "AUTO_CACHE_BYTES", 1 << 40)
    monkeypatch.setattr(dsmod, "_available_memory", lambda: 4 * 1000)  # a quarter of free memory is the cap
    assert DetectionDataset(d.train, imgsz=64, augment=True, nc=d.nc, cache="auto")._ram is None
