"""YOLO label files: locating, strict parsing, image checks and the label cache.

Layout: the label of ``.../images/<sub>/x.jpg`` is ``.../labels/<sub>/x.txt`` (the last
``images`` path component is replaced by ``labels``; an image path without one looks for the
.txt next to the image). Each non-blank line is ``cls cx cy w h``: an integer class id and a box
centre/size normalised by the image width and height.

Bad-input policy (strict; a dataset error is better found at scan time than as a silently worse
model):

* a line without exactly 5 fields, with a non-number, a class id that is not an integer in
  ``[0, nc)``, a coordinate outside ``[0, 1]`` by more than :data:`TOLERANCE`, or a width or
  height that is not positive -> :class:`~libreyolo.errors.DatasetError` naming the file and
  the 1-based line number. Coordinates within the tolerance are clipped to ``[0, 1]``, and box
  edges that stick out of the image are clipped to it.
* an image without a label file is a background image (no objects); all of them are counted in
  ONE warning. An empty label file is a background image without a warning.
* an image that cannot be opened, is truncated or has no pixels is skipped, with a warning
  naming it.
* no usable image at all -> :class:`~libreyolo.errors.DatasetError`.

Cache: the scan result is stored in ``<labels folder>.libreyolo.cache`` (e.g.
``labels/train.libreyolo.cache``; other tools write ``labels/train.cache`` in the same folder, which
is never read, written or removed here),
an ``.npz`` file read with ``allow_pickle=False``, keyed by a hash of every image and label
path with its size and modification time, ``nc`` and :data:`CACHE_VERSION`. Any change
invalidates it; an unreadable cache is rebuilt; a read-only dataset folder just runs without
saving one.
"""

from __future__ import annotations

import hashlib
import logging
import os
import zipfile
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from pathlib import Path

import numpy as np
from PIL import Image
from tqdm import tqdm

from ..errors import DatasetError
from .constants import IMG_SUFFIXES

logger = logging.getLogger(__name__)

CACHE_VERSION = 1
# the label cache file name ends so: a name no other tool writes (Ultralytics writes labels/<split>.cache)
CACHE_SUFFIX = ".libreyolo.cache"
TOLERANCE = 1e-3
_MAX_NAMED = 10


def label_path(img_file: str | Path) -> Path:
    """The label file of an image: last ``images`` component -> ``labels``, suffix -> ``.txt``."""
    p = Path(img_file)
    parts = list(p.parts)
    for i in range(len(parts) - 2, -1, -1):
        if parts[i] == "images":
            parts[i] = "labels"
            return Path(*parts).with_suffix(".txt")
    return p.with_suffix(".txt")


def parse_label_file(path: Path, *, nc: int) -> np.ndarray:
    """Parse one label file under the strict policy of this module.

    Returns (ndarray[n, 5], float32): rows ``cls, cx, cy, w, h`` normalised, clipped to the image.
    """
    try:
        text = path.read_text()
    except (OSError, UnicodeDecodeError) as e:
        raise DatasetError(f"label file {path} cannot be read: {e}") from e
    rows: list[list[float]] = []
    for lineno, line in enumerate(text.splitlines(), 1):
        fields = line.split()
        if not fields:
            continue
        where = f"{path}:{lineno}"
        if len(fields) != 5:
            raise DatasetError(f"{where}: expected 5 fields 'cls cx cy w h', got {len(fields)} "
                               f"({line.strip()!r}); polygon/segment labels are not supported here")
        try:
            vals = [float(v) for v in fields]
        except ValueError as e:
            raise DatasetError(f"{where}: non-numeric field in {line.strip()!r}") from e
        cls = vals[0]
        if not np.isfinite(cls) or cls != int(cls) or not 0 <= cls < nc:
            raise DatasetError(f"{where}: class id {fields[0]} is not an integer in [0, {nc}) "
                               f"(nc={nc} from the dataset names); fix the label or the names list")
        box = np.array(vals[1:], np.float64)
        if not np.all(np.isfinite(box)) or np.any(box < -TOLERANCE) or np.any(box > 1 + TOLERANCE):
            raise DatasetError(f"{where}: coordinates {fields[1:]} outside [0, 1]; labels must be "
                               "'cls cx cy w h' normalised by image width/height")
        cx, cy, w, h = np.clip(box, 0.0, 1.0)
        x1, y1 = max(cx - w / 2, 0.0), max(cy - h / 2, 0.0)
        x2, y2 = min(cx + w / 2, 1.0), min(cy + h / 2, 1.0)
        if x2 - x1 <= 0 or y2 - y1 <= 0:
            raise DatasetError(f"{where}: box has zero width or height ({line.strip()!r})")
        rows.append([cls, (x1 + x2) / 2, (y1 + y2) / 2, x2 - x1, y2 - y1])
    return np.array(rows, np.float32).reshape(-1, 5)


def check_image(path: Path) -> tuple[tuple[int, int] | None, str]:
    """(h, w) as displayed (EXIF rotation applied) and "" for a usable image, else (None, reason)."""
    try:
        with Image.open(path) as im:
            w, h = im.size
            fmt = im.format
            im.verify()
        orientation = 1
        if fmt in ("JPEG", "MPO", "TIFF", "WEBP"):  # verify() consumed the file: reopen for EXIF
            with Image.open(path) as im:
                orientation = im.getexif().get(0x0112, 1)
        if fmt == "JPEG":
            with open(path, "rb") as f:
                f.seek(-2, os.SEEK_END)
                if f.read() != b"\xff\xd9":
                    return None, "truncated JPEG (no end-of-image marker)"
    except (OSError, ValueError, SyntaxError, Image.DecompressionBombError) as e:
        return None, f"cannot be read as an image ({type(e).__name__}: {e})"
    if w < 2 or h < 2:
        return None, f"too small ({w}x{h})"
    if orientation in (5, 6, 7, 8):
        w, h = h, w
    return (h, w), ""


@dataclass(frozen=True, kw_only=True)
class LabelIndex:
    """Scan result. im_files: usable images; shapes (ndarray[N, 2], int64): (h, w);
    labels: per image (ndarray[n, 5], float32) ``cls cx cy w h`` normalised; n_background:
    images without a label file; corrupt: (file, reason) of skipped images."""

    im_files: list[str]
    shapes: np.ndarray
    labels: list[np.ndarray]
    n_background: int
    corrupt: list[tuple[str, str]]


def _stat(p: Path) -> str:
    try:
        st = p.stat()
    except OSError:
        return "-"
    return f"{st.st_size}:{st.st_mtime_ns}"


def files_hash(img_files: list[Path], *, nc: int) -> str:
    """Hash of every image and label path with its size and mtime, ``nc`` and the cache version."""
    h = hashlib.sha256(f"v{CACHE_VERSION}|nc={nc}".encode())
    for f in img_files:
        lab = label_path(f)
        h.update(f"\n{f}|{_stat(f)}|{lab}|{_stat(lab)}".encode())
    return h.hexdigest()


def _is_whole_folder(img_files: list[Path]) -> bool:
    """True when the files are exactly the images of one folder (a split given as a folder)."""
    parent = img_files[0].parent
    if any(f.parent != parent for f in img_files):
        return False
    try:
        with os.scandir(parent) as it:
            n = sum(1 for e in it if os.path.splitext(e.name)[1].lower() in IMG_SUFFIXES)
    except OSError:
        return False
    return n == len(set(img_files))


def default_cache_path(img_files: list[Path], *, cache_dir: Path | None) -> Path:
    """Where the label cache of ``img_files`` lives.

    ``<labels folder>.libreyolo.cache`` next to the labels when the files are one whole image folder;
    otherwise (list files, several folders) ``<labels folder>-<hash of the file list>.libreyolo.cache``, so
    that two splits listed from the same folder keep separate caches. With ``cache_dir``, the
    file goes there, its name made unique by the labels folder path.
    """
    files = [Path(f) for f in img_files]
    labels_dir = label_path(files[0]).parent
    stem = labels_dir.name
    if not _is_whole_folder(files):
        listing = hashlib.sha256("\n".join(sorted(map(str, files))).encode()).hexdigest()[:8]
        stem = f"{stem}-{listing}"
    if cache_dir is None:
        return labels_dir.with_name(stem + CACHE_SUFFIX)
    tag = hashlib.sha256(str(labels_dir).encode()).hexdigest()[:10]
    return Path(cache_dir) / f"{stem}-{tag}{CACHE_SUFFIX}"


def _scan_one(f: Path, nc: int) -> tuple[tuple[int, int] | None, str, np.ndarray | None]:
    shape, reason = check_image(f)
    if shape is None:
        return None, reason, None
    lab = label_path(f)
    if not lab.is_file():
        return shape, "", None
    return shape, "", parse_label_file(lab, nc=nc)


def _load_cache(path: Path, digest: str) -> LabelIndex | None:
    try:
        with np.load(path, allow_pickle=False) as z:
            if int(z["version"]) != CACHE_VERSION or str(z["hash"]) != digest:
                return None
            counts = z["counts"]
            flat = z["labels"]
            splits = np.cumsum(counts)[:-1]
            labels = [a.reshape(-1, 5) for a in np.split(flat, splits)] if len(counts) else []
            return LabelIndex(
                im_files=[str(s) for s in z["files"]], shapes=z["shapes"].astype(np.int64),
                labels=labels, n_background=int(z["n_background"]),
                corrupt=list(zip([str(s) for s in z["corrupt_files"]],
                                 [str(s) for s in z["corrupt_msgs"]], strict=True)))
    except (FileNotFoundError, NotADirectoryError):
        return None
    except (OSError, ValueError, KeyError, EOFError, zipfile.BadZipFile) as e:
        # documented fallback: a damaged cache is only an optimisation, so rebuild it
        logger.warning("label cache %s is unreadable (%s: %s); rebuilding it", path, type(e).__name__, e)
        return None


def _save_cache(path: Path, digest: str, idx: LabelIndex) -> bool:
    tmp = path.with_name(f"{path.name}.tmp{os.getpid()}")
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        with open(tmp, "wb") as f:
            np.savez(
                f, version=np.array(CACHE_VERSION), hash=np.array(digest),
                files=np.array(idx.im_files, dtype=str), shapes=idx.shapes.reshape(-1, 2),
                counts=np.array([len(a) for a in idx.labels], np.int64),
                labels=(np.concatenate(idx.labels) if idx.labels else np.zeros((0, 5))).astype(np.float32),
                n_background=np.array(idx.n_background),
                corrupt_files=np.array([c[0] for c in idx.corrupt], dtype=str),
                corrupt_msgs=np.array([c[1] for c in idx.corrupt], dtype=str))
        os.replace(tmp, path)
        return True
    except OSError as e:
        logger.warning("label cache not saved to %s (%s); the next run will scan again", path, e)
        try:
            tmp.unlink(missing_ok=True)
        except OSError:
            pass
        return False


def scan_labels(img_files: list[Path], *, nc: int, cache_path: Path | None = None,
                prefix: str = "") -> LabelIndex:
    """Check every image, parse every label (or read them from a valid cache), warn, summarise.

    Raises :class:`DatasetError` for a bad label line (file:line named) or no usable image.
    """
    if not img_files:
        raise DatasetError(f"{prefix}empty dataset: no image files given")
    img_files = [Path(f) for f in img_files]
    cache_path = cache_path or default_cache_path(img_files, cache_dir=None)
    digest = files_hash(img_files, nc=nc)
    idx = _load_cache(cache_path, digest)
    source = f"cache {cache_path}"
    if idx is None:
        logger.info("%sscanning %d images and labels (%s)...", prefix, len(img_files),
                    label_path(img_files[0]).parent)
        kept: list[str] = []
        shapes: list[tuple[int, int]] = []
        labels: list[np.ndarray] = []
        corrupt: list[tuple[str, str]] = []
        n_background = 0
        threads = max(1, min(8, os.cpu_count() or 1))
        with ThreadPoolExecutor(threads) as pool, tqdm(
            total=len(img_files), desc=f"{prefix}scanning labels", unit="img", disable=None,
            leave=False) as bar:
            for f, (shape, reason, lab) in zip(img_files, pool.map(lambda f: _scan_one(f, nc), img_files), strict=True):
                bar.update(1)
                if shape is None:
                    corrupt.append((str(f), reason))
                    continue
                kept.append(str(f))
                shapes.append(shape)
                if lab is None:
                    n_background += 1
                    lab = np.zeros((0, 5), np.float32)
                labels.append(lab)
        idx = LabelIndex(im_files=kept, shapes=np.array(shapes, np.int64).reshape(-1, 2),
                         labels=labels, n_background=n_background, corrupt=corrupt)
        source = f"cache saved to {cache_path}" if _save_cache(cache_path, digest, idx) else "no cache"
    if idx.corrupt:
        named = "; ".join(f"{f}: {r}" for f, r in idx.corrupt[:_MAX_NAMED])
        more = f" (+{len(idx.corrupt) - _MAX_NAMED} more)" if len(idx.corrupt) > _MAX_NAMED else ""
        logger.warning("%sskipped %d corrupt or unreadable image(s): %s%s", prefix,
                       len(idx.corrupt), named, more)
    if idx.n_background:
        logger.warning("%s%d of %d images have no label file and are used as background (no "
                       "objects); expected labels next to them under a 'labels' folder, e.g. %s",
                       prefix, idx.n_background, len(idx.im_files),
                       label_path(img_files[0]))
    if not idx.im_files:
        raise DatasetError(f"{prefix}empty dataset: none of the {len(img_files)} images could be "
                           f"read (first: {idx.corrupt[0][0]}: {idx.corrupt[0][1]})")
    n_boxes = sum(len(a) for a in idx.labels)
    logger.info("%s%d images, %d boxes, %d background, %d corrupt skipped (%s)", prefix,
                len(idx.im_files), n_boxes, idx.n_background, len(idx.corrupt), source)
    return idx
