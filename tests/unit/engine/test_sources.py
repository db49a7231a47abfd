"""Every prediction source type, batching, and each bad input (libreyolo.engine.sources)."""

from __future__ import annotations

from pathlib import Path

import cv2
import numpy as np
import pytest
import torch
from PIL import Image

from libreyolo.engine.sources import SourceItem, load_source, read_image
from libreyolo.errors import SourceError


def _rgb(h: int = 12, w: int = 16, seed: int = 0) -> np.ndarray:
    """A small RGB image whose channels differ, so an RGB/BGR swap is visible."""
    im = np.zeros((h, w, 3), np.uint8)
    im[..., 0] = 200  # R
    im[..., 1] = 100 + seed  # G
    im[..., 2] = 10  # B
    return im


def _write(path: Path, rgb: np.ndarray) -> Path:
    assert cv2.imwrite(str(path), cv2.cvtColor(rgb, cv2.COLOR_RGB2BGR))
    return path


def _items(source, *, batch: int = 1, **kw) -> list[SourceItem]:
    return [it for chunk in load_source(source, batch=batch, **kw) for it in chunk]


def _check_item(it: SourceItem) -> None:
    assert it.image.dtype == np.uint8 and it.image.ndim == 3 and it.image.shape[2] == 3
    assert it.image.flags["C_CONTIGUOUS"]


def _make_video(folder: Path, n: int = 5) -> Path:
    """A tiny n-frame video whose frame i has brightness 40 * i (mp4v .mp4, else MJPG .avi)."""
    for name, fourcc in (("clip.mp4", "mp4v"), ("clip.avi", "MJPG")):
        path = folder / name
        writer = cv2.VideoWriter(str(path), cv2.VideoWriter_fourcc(*fourcc), 5.0, (32, 24))
        if not writer.isOpened():
            continue
        for i in range(n):
            writer.write(np.full((24, 32, 3), 40 * i, np.uint8))
        writer.release()
        cap = cv2.VideoCapture(str(path))
        ok = cap.isOpened() and cap.read()[0]
        cap.release()
        if ok:
            return path
    pytest.fail("OpenCV can write neither mp4v nor MJPG video here")


# ------------------------------------------------------------------ files, folders, globs
@pytest.mark.parametrize("suffix", [".jpg", ".png", ".bmp", ".webp", ".tif"])
def test_image_file_formats_decode_to_rgb(tmp_path: Path, suffix: str) -> None:
    rgb = _rgb()
    path = _write(tmp_path / f"im{suffix}", rgb)
    (item,) = _items(str(path))
    _check_item(item)
    assert item.path == str(path) and item.frame is None
    assert item.image.shape == rgb.shape
    tol = 6 if suffix in (".jpg", ".webp") else 0  # lossy formats
    assert np.abs(item.image.astype(int) - rgb.astype(int)).max() <= tol  # R stays R (no BGR swap)


def test_pathlib_path_and_grayscale_file(tmp_path: Path) -> None:
    gray = np.full((10, 14), 77, np.uint8)
    path = tmp_path / "g.png"
    cv2.imwrite(str(path), gray)
    (item,) = _items(path)
    assert item.image.shape == (10, 14, 3) and (item.image == 77).all()


def test_directory_is_naturally_sorted_and_skips_other_files(tmp_path: Path) -> None:
    for name in ("img10.png", "img2.png", "img1.png"):
        _write(tmp_path / name, _rgb())
    (tmp_path / "notes.txt").write_text("not an image")
    (tmp_path / "sub").mkdir()
    names = [Path(it.path).name for it in _items(tmp_path)]
    assert names == ["img1.png", "img2.png", "img10.png"]


def test_glob_pattern(tmp_path: Path) -> None:
    for name in ("a.png", "b.png", "c.jpg"):
        _write(tmp_path / name, _rgb())
    names = [Path(it.path).name for it in _items(str(tmp_path / "*.png"))]
    assert names == ["a.png", "b.png"]


def test_pil_image_is_converted_to_rgb() -> None:
    rgb = _rgb()
    (item,) = _items(Image.fromarray(rgb))
    np.testing.assert_array_equal(item.image, rgb)
    rgba = Image.fromarray(np.dstack([rgb, np.full(rgb.shape[:2], 9, np.uint8)]), mode="RGBA")
    (item,) = _items(rgba)
    np.testing.assert_array_equal(item.image, rgb)
    (item,) = _items(Image.fromarray(rgb).convert("L"))
    assert item.image.shape == rgb.shape and item.path is None


# ------------------------------------------------------------------ arrays and tensors
def test_numpy_is_bgr_by_default_and_rgb_when_asked() -> None:
    """The OpenCV convention: a cv2 frame goes in as is; ``bgr=False`` opts in to RGB arrays."""
    rgb = _rgb()
    bgr = rgb[:, :, ::-1].copy()
    (default,) = _items(bgr)
    np.testing.assert_array_equal(default.image, rgb)  # the network is fed RGB
    np.testing.assert_array_equal(default.orig, bgr)  # the original keeps OpenCV order
    assert default.orig is default.bgr and np.shares_memory(default.orig, bgr)  # no copy of the user's frame
    (explicit,) = _items(bgr, bgr=True)
    np.testing.assert_array_equal(explicit.image, rgb)
    (as_rgb,) = _items(rgb, bgr=False)
    np.testing.assert_array_equal(as_rgb.image, rgb)
    np.testing.assert_array_equal(as_rgb.orig, bgr)
    _check_item(default)
    assert default.orig.flags["C_CONTIGUOUS"] and as_rgb.orig.flags["C_CONTIGUOUS"]


def test_every_source_type_gives_rgb_image_and_bgr_orig(tmp_path: Path) -> None:
    """One colour, five ways in: a file, a cv2 array, an RGB array, PIL, a tensor — same pixels out."""
    rgb = _rgb()
    bgr = cv2.cvtColor(rgb, cv2.COLOR_RGB2BGR)
    png = _write(tmp_path / "c.png", rgb)
    sources = [str(png), bgr, Image.fromarray(rgb), torch.from_numpy(rgb).permute(2, 0, 1)]
    items = _items(sources) + _items(rgb, bgr=False)
    for it in items:
        np.testing.assert_array_equal(it.image, rgb)
        np.testing.assert_array_equal(it.orig, bgr)
    np.testing.assert_array_equal(items[0].orig, cv2.imread(str(png)))  # exactly what cv2.imread gives


def test_numpy_grayscale_alpha_and_batch() -> None:
    (g,) = _items(np.full((5, 7), 3, np.uint8))
    assert g.image.shape == (5, 7, 3) and (g.image == 3).all() and (g.orig == 3).all()
    bgra = np.dstack([_rgb()[:, :, ::-1], np.zeros((12, 16), np.uint8)])  # cv2.IMREAD_UNCHANGED order
    (a,) = _items(bgra)
    np.testing.assert_array_equal(a.image, _rgb())
    np.testing.assert_array_equal(a.orig, _rgb()[:, :, ::-1])
    batch = np.stack([_rgb(seed=i)[:, :, ::-1] for i in range(3)])
    items = _items(batch)
    assert [int(it.image[0, 0, 1]) for it in items] == [100, 101, 102]
    assert [int(it.image[0, 0, 0]) for it in items] == [200, 200, 200]  # R first after the flip


def test_tensor_uint8_and_float() -> None:
    rgb = _rgb()
    chw = torch.from_numpy(rgb).permute(2, 0, 1)
    (item,) = _items(chw)
    np.testing.assert_array_equal(item.image, rgb)
    items = _items(torch.stack([chw, chw]).float() / 255.0)
    assert len(items) == 2
    np.testing.assert_array_equal(items[1].image, rgb)
    _check_item(items[0])


@pytest.mark.parametrize(
    ("tensor", "match"),
    [
        (torch.full((3, 4, 4), 2.0), r"\[0, 1\]"),
        (torch.full((3, 4, 4), -0.5), r"\[0, 1\]"),
        (torch.full((3, 4, 4), float("nan")), r"\[0, 1\]"),
        (torch.zeros(4, 4, 3), "shape"),
        (torch.zeros(1, 1, 4, 4), "shape"),
        (torch.zeros(3, 4, 4, dtype=torch.int32), "dtype"),
    ],
)
def test_bad_tensors_are_rejected(tensor: torch.Tensor, match: str) -> None:
    with pytest.raises(SourceError, match=match):
        load_source(tensor, batch=1, bgr=False)


# ------------------------------------------------------------------ video
def test_video_frames_stream_lazily_with_indices(tmp_path: Path) -> None:
    video = _make_video(tmp_path, n=5)
    batches = load_source(str(video), batch=2, bgr=False)
    first = next(batches)  # only the first batch has been decoded
    assert [it.frame for it in first] == [0, 1]
    rest = [it for chunk in batches for it in chunk]
    frames = first + rest
    assert [it.frame for it in frames] == [0, 1, 2, 3, 4]
    assert all(it.path == str(video) for it in frames)
    means = [float(it.image.mean()) for it in frames]
    assert means == sorted(means) and means[-1] - means[0] > 100  # frames in order
    _check_item(frames[0])


def test_corrupt_video_is_named(tmp_path: Path) -> None:
    bad = tmp_path / "broken.mp4"
    bad.write_bytes(b"\x00not a video at all" * 10)
    with pytest.raises(SourceError, match="broken.mp4"):
        _items(str(bad))


# ------------------------------------------------------------------ lists and batching
def test_list_of_mixed_sources_is_flattened_in_order_and_batched(tmp_path: Path) -> None:
    p = _write(tmp_path / "x.png", _rgb(seed=1))
    folder = tmp_path / "d"
    folder.mkdir()
    _write(folder / "y.png", _rgb(seed=2))
    src = [str(p), _rgb(seed=3)[:, :, ::-1], Image.fromarray(_rgb(seed=4)),
           torch.from_numpy(_rgb(seed=5)).permute(2, 0, 1), folder]
    chunks = list(load_source(src, batch=2))
    assert [len(c) for c in chunks] == [2, 2, 1]
    greens = [int(it.image[0, 0, 1]) for c in chunks for it in c]
    assert greens == [101, 103, 104, 105, 102]
    assert chunks[0][0].path == str(p) and chunks[0][1].path is None


def test_batch_larger_than_source_yields_one_list() -> None:
    chunks = list(load_source([_rgb()] * 3, batch=8, bgr=False))
    assert [len(c) for c in chunks] == [3]


def test_video_inside_list_batches_across_boundaries(tmp_path: Path) -> None:
    video = _make_video(tmp_path, n=5)
    chunks = list(load_source([_rgb(), str(video)], batch=4, bgr=False))
    assert [len(c) for c in chunks] == [4, 2]
    assert [it.frame for c in chunks for it in c] == [None, 0, 1, 2, 3, 4]


# ------------------------------------------------------------------ bad input
def test_missing_path(tmp_path: Path) -> None:
    with pytest.raises(SourceError, match="does not exist"):
        load_source(str(tmp_path / "nope.jpg"), batch=1, bgr=False)


def test_missing_path_inside_a_list_fails_before_decoding(tmp_path: Path) -> None:
    good = _write(tmp_path / "ok.png", _rgb())
    with pytest.raises(SourceError, match="missing.png"):
        load_source([str(good), str(tmp_path / "missing.png")], batch=1, bgr=False)


def test_empty_directory_and_glob(tmp_path: Path) -> None:
    (tmp_path / "readme.txt").write_text("x")
    with pytest.raises(SourceError, match="no image or video files"):
        load_source(tmp_path, batch=1, bgr=False)
    with pytest.raises(SourceError, match="matched no image"):
        load_source(str(tmp_path / "*.jpg"), batch=1, bgr=False)


def test_corrupt_image_is_named(tmp_path: Path) -> None:
    bad = tmp_path / "corrupt.jpg"
    bad.write_bytes(b"definitely not a jpeg")
    with pytest.raises(SourceError, match="corrupt.jpg"):
        _items(str(bad))
    empty = tmp_path / "empty.png"
    empty.write_bytes(b"")
    with pytest.raises(SourceError, match="empty.png"):
        read_image(empty)


def test_corrupt_files_in_a_folder_are_skipped_with_one_warning_each(tmp_path: Path, caplog) -> None:
    """One bad file does not stop a folder: every good image still comes out, in order."""
    for name in ("a.png", "c.png", "e.png"):
        _write(tmp_path / name, _rgb())
    (tmp_path / "b.jpg").write_bytes(b"definitely not a jpeg")
    (tmp_path / "d.png").write_bytes(b"")
    (tmp_path / "f.mp4").write_bytes(b"\x00not a video" * 10)
    loader = load_source(tmp_path, batch=2)
    with caplog.at_level("WARNING", logger="libreyolo.engine.sources"):
        paths = [Path(it.path).name for chunk in loader for it in chunk]
    assert paths == ["a.png", "c.png", "e.png"]
    assert [Path(s.path).name for s in loader.skipped] == ["b.jpg", "d.png", "f.mp4"]
    assert loader.n_skipped == 3 and loader.n_read == 3
    warned = [r for r in caplog.records if getattr(r, "skipped_source", None)]
    assert [Path(r.skipped_source).name for r in warned] == ["b.jpg", "d.png", "f.mp4"]  # once per file
    assert all(r.levelname == "WARNING" and Path(r.skipped_source).name in r.getMessage() for r in warned)


def test_nothing_readable_is_an_error(tmp_path: Path) -> None:
    (tmp_path / "x.jpg").write_bytes(b"junk")
    (tmp_path / "y.jpg").write_bytes(b"junk")
    loader = load_source(tmp_path, batch=1)
    with pytest.raises(SourceError, match=r"none of the 2 files .* could be read.*x\.jpg"):
        list(loader)
    assert loader.n_skipped == 2 and loader.n_read == 0


def test_unknown_extension_says_what_is_supported(tmp_path: Path) -> None:
    txt = tmp_path / "labels.txt"
    txt.write_text("0 0.5 0.5 0.1 0.1")
    with pytest.raises(SourceError, match=r"'\.txt' is not a known image"):
        _items(str(txt))


@pytest.mark.parametrize("bad", [42, 3.5, {"a": 1}, b"bytes", None])
def test_unsupported_types_list_the_supported_ones(bad) -> None:
    with pytest.raises(SourceError, match="PIL.Image"):
        load_source(bad, batch=1, bgr=False)


@pytest.mark.parametrize(
    ("arr", "match"),
    [
        (np.zeros((4, 4, 3), np.float32), "uint8"),
        (np.zeros((4, 4, 2), np.uint8), "shape"),
        (np.zeros((4,), np.uint8), "shape"),
        (np.zeros((0, 4, 3), np.uint8), "empty"),
    ],
)
def test_bad_arrays(arr: np.ndarray, match: str) -> None:
    with pytest.raises(SourceError, match=match):
        load_source(arr, batch=1, bgr=False)


def test_other_bad_inputs(tmp_path: Path) -> None:
    with pytest.raises(SourceError, match="empty list"):
        load_source([], batch=1, bgr=False)
    with pytest.raises(SourceError, match="nested"):
        load_source([[_rgb()]], batch=1, bgr=False)
    with pytest.raises(SourceError, match="URL"):
        load_source("https://example.com/a.jpg", batch=1, bgr=False)
    with pytest.raises(SourceError, match="batch"):
        load_source(_rgb(), batch=0, bgr=False)
    assert issubclass(SourceError, ValueError)
