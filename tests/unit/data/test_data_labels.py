"""Label files: strict parsing (file:line errors), background and corrupt images, the cache."""

from __future__ import annotations

import logging
import os
from pathlib import Path

import numpy as np
import pytest

import libreyolo.data.labels as labels_mod
from libreyolo.data.labels import default_cache_path, label_path, parse_label_file, scan_labels
from libreyolo.errors import DatasetError


def test_label_path_replaces_last_images_component() -> None:
    assert label_path("/d/images/x/images/train/a.jpg") == Path("/d/images/x/labels/train/a.txt")
    assert label_path("/d/pics/a.png") == Path("/d/pics/a.txt")


def test_parse_valid_and_tolerance_clip(tmp_path: Path, write_text) -> None:
    f = write_text(tmp_path / "a.txt", "0 0.5 0.5 0.2 0.4\n\n2 1.0005 0.5 0.1 0.1\n1 0.05 0.5 0.2 0.2\n")
    out = parse_label_file(f, nc=3)
    assert out.dtype == np.float32 and out.shape == (3, 5)
    np.testing.assert_allclose(out[0], [0, 0.5, 0.5, 0.2, 0.4], atol=1e-6)
    # 1.0005 clipped to 1, then the box edge clipped to the image: x in [0.95, 1.0]
    np.testing.assert_allclose(out[1], [2, 0.975, 0.5, 0.05, 0.1], atol=1e-6)
    # left edge at -0.05 clipped: x in [0, 0.15]
    np.testing.assert_allclose(out[2], [1, 0.075, 0.5, 0.15, 0.2], atol=1e-6)


@pytest.mark.parametrize(
    ("line", "message"),
    [
        ("0 0.5 0.5 0.2", "expected 5 fields"),
        ("0 0.5 0.5 0.2 0.2 0.1", "expected 5 fields"),
        ("0 0.5 abc 0.2 0.2", "non-numeric"),
        ("3 0.5 0.5 0.2 0.2", r"class id 3 is not an integer in \[0, 3\)"),
        ("-1 0.5 0.5 0.2 0.2", "class id -1"),
        ("1.5 0.5 0.5 0.2 0.2", "class id 1.5"),
        ("0 1.2 0.5 0.2 0.2", r"outside \[0, 1\]"),
        ("0 0.5 0.5 0.2 -0.01", r"outside \[0, 1\]"),
        ("0 0.5 0.5 0 0.2", "zero width or height"),
    ],
)
def test_bad_line_names_file_and_line(tmp_path: Path, write_text, line: str, message: str) -> None:
    f = write_text(tmp_path / "bad.txt", f"0 0.5 0.5 0.1 0.1\n\n{line}\n")
    with pytest.raises(DatasetError, match=message) as e:
        parse_label_file(f, nc=3)
    assert f"{f}:3:" in str(e.value)


def _dataset(root: Path, write_image, write_text, n: int = 3) -> list[Path]:
    files = []
    for i in range(n):
        files.append(write_image(root / "images" / "train" / f"{i}.jpg"))
        write_text(root / "labels" / "train" / f"{i}.txt", f"{i % 2} 0.5 0.5 0.25 0.5\n")
    return files


def test_scan_reads_labels_and_writes_cache(tmp_path: Path, write_image, write_text) -> None:
    files = _dataset(tmp_path, write_image, write_text)
    idx = scan_labels(files, nc=2)
    assert idx.im_files == [str(f) for f in files]
    assert idx.shapes.tolist() == [[48, 64]] * 3
    assert [a[:, 0].tolist() for a in idx.labels] == [[0.0], [1.0], [0.0]]
    assert (tmp_path / "labels" / "train.libreyolo.cache").is_file()
    assert not (tmp_path / "labels" / "train.cache").exists()


def test_another_tools_cache_is_left_alone(tmp_path: Path, write_image, write_text, monkeypatch) -> None:
    """``labels/train.cache`` (Ultralytics' name) is neither read nor rewritten: both tools keep their caches."""
    files = _dataset(tmp_path, write_image, write_text)
    foreign = tmp_path / "labels" / "train.cache"
    foreign.write_bytes(b"another tool's cache")
    scan_labels(files, nc=2)
    assert foreign.read_bytes() == b"another tool's cache"

    def boom(*a, **k):
        raise AssertionError("scanned although our cache is valid")

    monkeypatch.setattr(labels_mod, "_scan_one", boom)
    assert len(scan_labels(files, nc=2).im_files) == 3  # ours is read back
    assert foreign.read_bytes() == b"another tool's cache"


def test_bad_label_in_scan_raises(tmp_path: Path, write_image, write_text) -> None:
    files = _dataset(tmp_path, write_image, write_text)
    write_text(tmp_path / "labels" / "train" / "1.txt", "0 0.5 0.5 0.2 0.2\n7 0.5 0.5 0.2 0.2\n")
    with pytest.raises(DatasetError, match=r"1\.txt:2: class id 7"):
        scan_labels(files, nc=2)


def test_cache_hit_skips_scanning(tmp_path: Path, write_image, write_text, monkeypatch) -> None:
    files = _dataset(tmp_path, write_image, write_text)
    first = scan_labels(files, nc=2)

    def boom(*a, **k):
        raise AssertionError("scanned although the cache is valid")

    monkeypatch.setattr(labels_mod, "_scan_one", boom)
    again = scan_labels(files, nc=2)
    assert again.im_files == first.im_files
    assert all(np.array_equal(a, b) for a, b in zip(again.labels, first.labels, strict=True))
    # a different nc is a different cache key
    with pytest.raises(AssertionError, match="scanned"):
        scan_labels(files, nc=3)


def test_cache_invalidated_by_label_change(tmp_path: Path, write_image, write_text) -> None:
    files = _dataset(tmp_path, write_image, write_text)
    scan_labels(files, nc=2)
    lab = tmp_path / "labels" / "train" / "0.txt"
    lab.write_text("1 0.5 0.5 0.25 0.5\n1 0.2 0.2 0.1 0.1\n")
    os.utime(lab, ns=(1, 1))  # also a different mtime, whatever the clock resolution
    idx = scan_labels(files, nc=2)
    assert idx.labels[0][:, 0].tolist() == [1.0, 1.0]
    # removing a label file invalidates too (and makes it background)
    lab.unlink()
    assert len(scan_labels(files, nc=2).labels[0]) == 0


def test_corrupt_cache_is_rebuilt(tmp_path: Path, write_image, write_text, caplog) -> None:
    files = _dataset(tmp_path, write_image, write_text)
    cache = default_cache_path(files, cache_dir=None)
    scan_labels(files, nc=2)
    cache.write_bytes(b"not a zip file at all")
    with caplog.at_level(logging.WARNING):
        idx = scan_labels(files, nc=2)
    assert "unreadable" in caplog.text and len(idx.im_files) == 3
    with np.load(cache, allow_pickle=False) as z:  # rewritten and valid again
        assert len(z["files"]) == 3


def test_cache_dir_and_read_only_fallback(tmp_path: Path, write_image, write_text) -> None:
    files = _dataset(tmp_path / "d", write_image, write_text)
    cache = default_cache_path(files, cache_dir=tmp_path / "cache")
    assert cache.parent == tmp_path / "cache" and cache.name.startswith("train-")
    idx = scan_labels(files, nc=2, cache_path=cache)
    assert cache.is_file() and len(idx.im_files) == 3
    blocked = tmp_path / "file-not-dir"
    blocked.write_text("x")
    assert len(scan_labels(files, nc=2, cache_path=blocked / "x.cache").im_files) == 3


def test_missing_labels_are_background_with_one_warning(tmp_path: Path, write_image, write_text, caplog) -> None:
    files = _dataset(tmp_path, write_image, write_text, n=4)
    for i in (1, 3):
        (tmp_path / "labels" / "train" / f"{i}.txt").unlink()
    with caplog.at_level(logging.WARNING, logger="libreyolo.data.labels"):
        idx = scan_labels(files, nc=2)
    warnings = [r for r in caplog.records if r.levelno == logging.WARNING]
    assert len(warnings) == 1 and "2 of 4 images have no label file" in warnings[0].getMessage()
    assert idx.n_background == 2 and [len(a) for a in idx.labels] == [1, 0, 1, 0]


def test_corrupt_image_skipped_with_warning(tmp_path: Path, write_image, write_text, caplog) -> None:
    files = _dataset(tmp_path, write_image, write_text)
    files[1].write_bytes(b"\xff\xd8 garbage, not a jpeg")
    good = files[2].read_bytes()
    files[2].write_bytes(good[: len(good) // 2])  # truncated
    with caplog.at_level(logging.WARNING):
        idx = scan_labels(files, nc=2)
    assert idx.im_files == [str(files[0])]
    assert str(files[1]) in caplog.text and str(files[2]) in caplog.text
    assert "truncated" in caplog.text.lower()


def test_empty_dataset(tmp_path: Path, write_image, write_text) -> None:
    with pytest.raises(DatasetError, match="empty dataset"):
        scan_labels([], nc=2)
    files = _dataset(tmp_path, write_image, write_text, n=2)
    for f in files:
        f.write_bytes(b"junk")
    with pytest.raises(DatasetError, match="empty dataset: none of the 2 images"):
        scan_labels(files, nc=2)


def test_list_splits_of_one_folder_get_separate_caches(tmp_path: Path, write_image, write_text) -> None:
    files = _dataset(tmp_path, write_image, write_text, n=4)
    train, val = files[:3], files[3:]
    c_train = default_cache_path(train, cache_dir=None)
    c_val = default_cache_path(val, cache_dir=None)
    c_all = default_cache_path(files, cache_dir=None)
    assert c_all == tmp_path / "labels" / "train.libreyolo.cache"  # the whole folder: plain name
    assert len({c_train, c_val, c_all}) == 3 and c_train.parent == tmp_path / "labels"
    scan_labels(train, nc=2, cache_path=c_train)
    scan_labels(val, nc=2, cache_path=c_val)
    assert c_train.is_file() and c_val.is_file()
