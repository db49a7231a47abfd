"""Rectangular training batches (libreyolo.data.batching): shapes, coverage, shuffling, DDP split."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

from libreyolo.data.batching import RectBatchSampler, rect_batch_shapes
from libreyolo.data.dataset import DetectionDataset, collate_detection
from libreyolo.data.loader import build_dataloader
from libreyolo.errors import ConfigError

# (h, w) of the images of the aspect-ratio dataset: wide, square and tall, deliberately unordered
SIZES = [(48, 96), (96, 48), (64, 64), (40, 100), (100, 50), (60, 90), (80, 80), (90, 45), (50, 100), (70, 70)]


@pytest.fixture
def aspect_ds(tmp_path: Path, write_image) -> list[Path]:
    files = []
    for k, (h, w) in enumerate(SIZES):
        img = write_image(tmp_path / "images" / "train" / f"im{k}.png", h=h, w=w, value=40 + 10 * k)
        lab = tmp_path / "labels" / "train" / f"im{k}.txt"
        lab.parent.mkdir(parents=True, exist_ok=True)
        lab.write_text(f"{k % 3} 0.5 0.5 0.4 0.3\n")
        files.append(img)
    return files


def test_rect_batch_shapes_hold_every_image_of_the_batch() -> None:
    shapes = np.array([[50, 100], [60, 100], [100, 100], [100, 50]])
    out = rect_batch_shapes(shapes, imgsz=64, batch=2, stride=32)
    # batch 0: resized (32, 64) and (38.4, 64) -> 64 x 64 after rounding up; batch 1: square and tall
    assert out.tolist() == [[64, 64], [64, 64], [64, 64], [64, 64]]
    out = rect_batch_shapes(np.array([[50, 100], [48, 100], [100, 40]]), imgsz=128, batch=2, stride=32)
    assert out.tolist() == [[64, 128], [64, 128], [128, 64]]
    assert (out % 32 == 0).all()


def test_sampler_yields_every_index_once_in_whole_chunks() -> None:
    s = RectBatchSampler(10, batch=4, shuffle=True, seed=3)
    for epoch in range(3):
        s.set_epoch(epoch)
        batches = list(s)
        assert len(batches) == len(s) == 3
        assert sorted(i for b in batches for i in b) == list(range(10))
        assert sorted(map(tuple, batches)) == [(0, 1, 2, 3), (4, 5, 6, 7), (8, 9)]


def test_sampler_shuffles_batch_order_by_seed_and_epoch_only() -> None:
    def order(seed: int, epoch: int) -> list[list[int]]:
        s = RectBatchSampler(40, batch=4, shuffle=True, seed=seed)
        s.set_epoch(epoch)
        return list(s)

    assert order(0, 1) == order(0, 1)
    assert order(0, 1) != order(0, 2) and order(0, 1) != order(1, 1)
    assert list(RectBatchSampler(9, batch=4, shuffle=False, seed=0)) == [[0, 1, 2, 3], [4, 5, 6, 7], [8]]


def test_sampler_splits_batches_over_ranks_deterministically() -> None:
    ranks = [RectBatchSampler(11, batch=2, shuffle=True, seed=5, rank=r, world_size=2) for r in range(2)]
    for s in ranks:
        s.set_epoch(4)
    got = [list(s) for s in ranks]
    assert len(got[0]) == len(got[1]) == len(ranks[0]) == 3  # 6 chunks over 2 ranks
    assert [list(s) for s in ranks] == got  # the same again
    assert sorted(i for b in got[0] + got[1] for i in b) == list(range(11))  # 6 chunks split evenly: disjoint
    odd = [RectBatchSampler(10, batch=4, shuffle=True, seed=0, rank=r, world_size=2) for r in range(2)]
    parts = [list(s) for s in odd]  # 3 chunks on 2 ranks: one is repeated so both run 2 steps
    assert len(parts[0]) == len(parts[1]) == 2
    assert set(i for b in parts[0] + parts[1] for i in b) == set(range(10))
    with pytest.raises(ConfigError):
        RectBatchSampler(4, batch=2, shuffle=True, seed=0, rank=2, world_size=2)


def test_rect_training_dataset_letterboxes_each_batch_to_its_shape(aspect_ds: list[Path]) -> None:
    ds = DetectionDataset(aspect_ds, imgsz=96, augment=True, nc=3, rect=True)
    assert not ds.mosaic_enabled  # rect: no mosaic
    ratios = ds.shapes[:, 0] / ds.shapes[:, 1]
    assert (np.diff(ratios) >= 0).all()  # sorted by aspect ratio
    shapes = ds.set_batch_shapes(4)
    sampler = RectBatchSampler(len(ds), batch=4, shuffle=True, seed=0)
    loader = build_dataloader(ds, batch=4, workers=0, shuffle=True, seed=0, batch_sampler=sampler)
    seen = []
    for batch in loader:
        idx = [ds.im_files.index(f) for f in batch["im_file"]]
        h, w = (int(v) for v in shapes[idx[0]])
        assert tuple(batch["img"].shape) == (len(idx), 3, h, w)
        assert all(tuple(shapes[j]) == (h, w) for j in idx)
        assert h % 32 == 0 and w % 32 == 0 and max(h, w) == 96
        for j in idx:  # the batch holds each of its images at a long side of imgsz
            rh, rw = ds.rect_shape(j)
            assert h >= rh and w >= rw
        assert ((batch["bboxes"] >= 0) & (batch["bboxes"] <= 1)).all()
        seen += batch["im_file"]
    assert sorted(seen) == sorted(ds.im_files)  # every image once per epoch
    assert {tuple(s) for s in shapes.tolist()} > {(96, 96)}  # not all square: the rect shapes differ


def test_rect_validation_items_keep_their_own_shape(aspect_ds: list[Path]) -> None:
    ds = DetectionDataset(aspect_ds, imgsz=96, augment=False, nc=3, rect=True)
    assert ds.batch_shapes is None
    items = [ds[i] for i in range(len(ds))]
    assert [tuple(it["img"].shape[1:]) for it in items] == [ds.rect_shape(i) for i in range(len(ds))]
    batch = collate_detection(items[:3])
    assert batch["img"].shape[-2:] == (max(ds.rect_shape(i)[0] for i in range(3)),
                                       max(ds.rect_shape(i)[1] for i in range(3)))
    with pytest.raises(ConfigError):
        DetectionDataset(aspect_ds, imgsz=96, augment=True, nc=3).set_batch_shapes(4)
