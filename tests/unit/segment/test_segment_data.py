"""Segment task data: polygon label errors, rasterised masks and boxes that agree after every
transform, flips that mirror masks and boxes together, the shapes-seg generator (exact polygons,
byte-identical runs)."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest
import torch

from libreyolo.data.segment import (
    MASK_RATIO,
    SegmentDataset,
    collate_segment,
    masks_and_boxes,
    parse_polygon_file,
    rasterise,
)
from libreyolo.data.shapes import GENERATOR_VERSION, render_scene
from libreyolo.data.shapes_seg import ensure_shapes_seg_dataset, render_instances
from libreyolo.errors import DatasetError


@pytest.mark.parametrize("line,needle", [
    ("0 0.1 0.1 0.5 0.1 0.3", "odd number of coordinates (5)"),
    ("0 0.1 0.1 0.5 0.1", "at least 3 points"),
    ("0 0.1 0.1 1.5 0.1 0.3 0.4", "coordinate 1.5 is outside [0, 1]"),
    ("0 0.1 -0.2 0.5 0.1 0.3 0.4", "coordinate -0.2 is outside [0, 1]"),
    ("3 0.1 0.1 0.5 0.1 0.3 0.4", "class id 3 is not an integer in [0, 3)"),
    ("0 0.1 x 0.5 0.1 0.3 0.4", "non-number"),
])
def test_bad_label_lines_give_one_line_errors_naming_file_and_line(tmp_path: Path, line: str, needle: str) -> None:
    f = tmp_path / "img7.txt"
    f.write_text("1 0.1 0.1 0.5 0.1 0.3 0.4\n\n" + line + "\n")
    with pytest.raises(DatasetError) as e:
        parse_polygon_file(f, nc=3)
    msg = str(e.value)
    assert needle in msg and f"{f} line 3" in msg and "\n" not in msg


def test_good_lines_parse_and_a_missing_file_has_no_instances(tmp_path: Path) -> None:
    f = tmp_path / "a.txt"
    f.write_text("2 0 0 1 0 1 1 0 1\n0 0.25 0.25 0.75 0.25 0.5 0.75\n")
    got = parse_polygon_file(f, nc=3)
    assert [c for c, _ in got] == [2, 0] and got[0][1].shape == (4, 2) and got[1][1][2].tolist() == [0.5, 0.75]
    assert parse_polygon_file(tmp_path / "missing.txt", nc=3) == []


def test_boxes_are_tight_around_the_raster_and_cut_instances_drop() -> None:
    square = np.array([[4.0, 8.0], [12.0, 8.0], [12.0, 20.0], [4.0, 20.0]])
    outside = np.array([[40.0, 40.0], [50.0, 40.0], [50.0, 50.0]])
    masks, boxes, cls = masks_and_boxes([square, outside], [1, 2], 32)
    assert cls.tolist() == [1] and boxes.tolist() == [[4.0, 8.0, 13.0, 21.0]]
    assert masks.shape == (1, 8, 8) and masks.dtype == np.uint8
    full = rasterise([square], 32)[0]
    assert int(full.sum()) == 9 * 13


def _write_set(root: Path, n: int = 6) -> list[Path]:
    (root / "images").mkdir(parents=True)
    (root / "labels").mkdir()
    from libreyolo._cv import cv2
    from libreyolo.data.shapes_seg import polygon_line

    files = []
    for i in range(n):
        img, inst = render_instances(3, 0, i, imgsz=96)
        f = root / "images" / f"{i}.png"
        cv2.imwrite(str(f), img)
        (root / "labels" / f"{i}.txt").write_text("".join(polygon_line(c, p, img.shape[:2]) + "\n" for c, p in inst))
        files.append(f)
    return files


def _check_consistent(item: dict, s: int) -> None:
    """Every mask lies inside its box (one mask cell of slack for the 4 x 4 averaging), and a box
    at least three cells wide and high has a non-empty mask."""
    boxes = item["bboxes"].numpy() * s  # cx cy w h pixels
    x1y1, x2y2 = boxes[:, :2] - boxes[:, 2:] / 2, boxes[:, :2] + boxes[:, 2:] / 2
    for m, a, b in zip(item["masks"].numpy(), x1y1, x2y2, strict=True):
        ys, xs = np.nonzero(m)
        assert len(xs) > 0 or (b - a).min() < 3 * MASK_RATIO
        if len(xs):
            assert xs.min() * MASK_RATIO >= a[0] - MASK_RATIO and (xs.max() + 1) * MASK_RATIO <= b[0] + MASK_RATIO
            assert ys.min() * MASK_RATIO >= a[1] - MASK_RATIO and (ys.max() + 1) * MASK_RATIO <= b[1] + MASK_RATIO


def test_augmented_items_keep_masks_and_boxes_consistent(tmp_path: Path) -> None:
    files = _write_set(tmp_path)
    ds = SegmentDataset(files, imgsz=64, nc=6, augment=True, fliplr=0.5, flipud=0.5)
    n = 0
    for epoch in range(3):
        ds.set_epoch(epoch)
        for i in range(len(ds)):
            it = ds[i]
            assert it["img"].shape == (3, 64, 64) and it["masks"].shape[1:] == (16, 16)
            assert len(it["cls"]) == len(it["bboxes"]) == len(it["masks"])
            _check_consistent(it, 64)
            n += len(it["cls"])
    assert n > 10
    batch = collate_segment([ds[0], ds[1]])
    assert batch["masks"].shape[0] == batch["cls"].shape[0] == batch["batch_idx"].shape[0]


def test_a_flip_mirrors_image_masks_and_boxes_together(tmp_path: Path) -> None:
    files = _write_set(tmp_path, n=2)
    plain = SegmentDataset(files, imgsz=64, nc=6, augment=True, fliplr=0.0, hsv_h=0, hsv_s=0, hsv_v=0)
    flipped = SegmentDataset(files, imgsz=64, nc=6, augment=True, fliplr=1.0, hsv_h=0, hsv_s=0, hsv_v=0)
    for i in range(2):
        a, b = plain[i], flipped[i]
        assert torch.equal(a["img"].flip(-1), b["img"])
        assert torch.equal(a["masks"].flip(-1), b["masks"])
        mirrored = a["bboxes"].clone()
        mirrored[:, 0] = 1.0 - mirrored[:, 0]
        assert torch.allclose(mirrored, b["bboxes"], atol=1e-6) and torch.equal(a["cls"], b["cls"])


def test_validation_items_are_letterboxed_with_ratio_pad(tmp_path: Path) -> None:
    files = _write_set(tmp_path, n=1)
    it = SegmentDataset(files, imgsz=64, nc=6)[0]
    (rw, rh), (ox, oy) = it["ratio_pad"]
    h, w = it["ori_shape"]
    assert max(h, w) == 96 and abs(rw - 64 / 96) < 0.02 and (ox == 0 or oy == 0)
    _check_consistent(it, 64)


def test_shapes_seg_polygons_fill_back_to_the_drawn_pixels() -> None:
    for i in range(6):
        rng = np.random.default_rng([0, 0, i, GENERATOR_VERSION, 31])
        short = int(round(96 * rng.uniform(0.6, 1.0)))
        h, w = (short, 96) if rng.random() < 0.5 else (96, short)
        ids = np.zeros((h, w), np.uint8)
        _, labels = render_scene(rng, height=h, width=w, instance_out=ids)
        _, inst = render_instances(0, 0, i, imgsz=96)
        assert [c for c, _ in inst] == [int(c) for c in labels[:, 0]]
        for k, (_, poly) in enumerate(inst):
            filled = rasterise([poly], 96)[0][:h, :w].astype(bool)
            drawn = ids == k + 1
            assert (filled & drawn).sum() / (filled | drawn).sum() > 0.99


def test_shapes_seg_is_byte_identical_across_runs(tmp_path: Path) -> None:
    a = ensure_shapes_seg_dataset(tmp_path / "a", n_train=3, n_val=1, imgsz=64).parent
    b = ensure_shapes_seg_dataset(tmp_path / "b", n_train=3, n_val=1, imgsz=64).parent
    files = sorted(p.relative_to(a) for p in a.rglob("*") if p.is_file() and p.name != "data.yaml")
    assert len(files) == 8
    assert all((a / f).read_bytes() == (b / f).read_bytes() for f in files)
    assert any((a / f).read_text().strip() for f in files if f.suffix == ".txt")


def test_mosaic_items_keep_masks_and_boxes_consistent_until_closed(tmp_path: Path) -> None:
    files = _write_set(tmp_path)
    ds = SegmentDataset(files, imgsz=64, nc=6, augment=True, mosaic=1.0)
    assert ds.mosaic_enabled
    counts = []
    for i in range(len(ds)):
        it = ds[i]
        assert it["img"].shape == (3, 64, 64) and len(it["cls"]) == len(it["masks"])
        _check_consistent(it, 64)
        counts.append(len(it["cls"]))
    single = SegmentDataset(files, imgsz=64, nc=6, augment=True)
    assert sum(counts) > sum(len(single[i]["cls"]) for i in range(len(single)))  # four images' instances
    ds.close_mosaic()
    assert not ds.mosaic_enabled
    assert torch.equal(ds[0]["img"], single[0]["img"])  # the same draws as a dataset without mosaic


def test_a_coco_json_split_is_refused_not_read_as_empty() -> None:
    from types import SimpleNamespace

    from libreyolo.tasks.segment import SegmentTask

    with pytest.raises(DatasetError, match="COCO JSON labels are not read for segmentation"):
        SegmentTask().dataset(SimpleNamespace(coco={"val": object()}, nc=2), [], split="val", imgsz=64)
