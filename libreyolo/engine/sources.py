"""Prediction sources -> batches of RGB uint8 images (SPEC U-2).

:func:`load_source` accepts a file path, a directory, a glob pattern, a video file, a PIL image,
a numpy array, a torch tensor, or a list of any of these, and yields lists of up to ``batch``
:class:`SourceItem` objects. Everything a user could get wrong (missing path, empty folder,
corrupt image, wrong array shape or dtype, unsupported type) is checked when
:func:`load_source` is called, before the first image is decoded, and raises
:class:`~libreyolo.errors.SourceError`; only problems that need decoding (a corrupt file) are
reported when that file is reached. Images and video frames are read lazily, one batch at a
time, so a long video streams in constant memory.

Example:
    >>> import numpy as np
    >>> batches = load_source([np.zeros((4, 6, 3), np.uint8)] * 3, batch=2, bgr=False)
    >>> [len(b) for b in batches]
    [2, 1]
"""

from __future__ import annotations

import glob
import logging
import re
from collections.abc import Callable, Iterable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

from ..errors import SourceError

logger = logging.getLogger(__name__)

IMAGE_SUFFIXES: frozenset[str] = frozenset(
    {".jpg", ".jpeg", ".png", ".bmp", ".webp", ".tif", ".tiff", ".jp2", ".pbm", ".pgm", ".ppm", ".pnm"}
)
VIDEO_SUFFIXES: frozenset[str] = frozenset(
    {".mp4", ".avi", ".mov", ".mkv", ".webm", ".m4v", ".mpg", ".mpeg", ".wmv", ".flv", ".ts", ".gif"}
)
SUPPORTED_TYPES = (
    "a file path (str or pathlib.Path) to an image or video, a directory, a glob pattern, "
    "a PIL.Image, a numpy array (H x W x 3 uint8), a torch tensor (3 x H x W or B x 3 x H x W), "
    "or a list of these"
)
_GLOB_CHARS = re.compile(r"[*?\[]")
_URL = re.compile(r"^[a-zA-Z][a-zA-Z0-9+.-]*://")


@dataclass(frozen=True, kw_only=True)
class SourceItem:
    """One image or video frame.

    Attributes:
        image (np.ndarray[H, W, 3], uint8, C-contiguous): RGB pixels.
        path: the file it came from, or ``None`` for in-memory images.
        frame: 0-based frame index for video frames, else ``None``.
    """

    image: np.ndarray
    path: str | None = None
    frame: int | None = None


# An entry of the plan: a callable that yields the items of one source element lazily.
_Entry = Callable[[], Iterator[SourceItem]]


def load_source(source: Any, *, batch: int, bgr: bool) -> Iterator[list[SourceItem]]:
    """Resolve ``source`` and return an iterator of lists of up to ``batch`` items.

    Args:
        source: see the module docstring; lists are flattened in order.
        batch: the largest number of items per yielded list (>= 1).
        bgr: numpy arrays are BGR (OpenCV order) when True, RGB when False. Files, PIL images
            and tensors are decoded to RGB regardless.

    Raises:
        SourceError: missing path, empty directory or glob, unsupported type, bad array.
    """
    if isinstance(batch, bool) or not isinstance(batch, int) or batch < 1:
        raise SourceError(f"batch must be a positive int, got {batch!r}")
    entries = _plan(source, bgr=bgr, top=True)
    if not entries:
        raise SourceError("the source is an empty list; pass at least one image")
    return _batched(entries, batch)


def _batched(entries: list[_Entry], batch: int) -> Iterator[list[SourceItem]]:
    chunk: list[SourceItem] = []
    for entry in entries:
        for item in entry():
            chunk.append(item)
            if len(chunk) == batch:
                yield chunk
                chunk = []
    if chunk:
        yield chunk


# ---------------------------------------------------------------------------- planning
def _plan(source: Any, *, bgr: bool, top: bool) -> list[_Entry]:
    """Validate ``source`` and turn it into a list of lazy entries (no decoding yet)."""
    if source is None:
        raise SourceError(f"no source given; pass {SUPPORTED_TYPES}")
    if isinstance(source, (str, Path)):
        return _plan_path(source)
    if isinstance(source, np.ndarray):
        return _plan_array(source, bgr=bgr)
    if _is_pil(source):
        return [_const(_from_pil(source))]
    if _is_tensor(source):
        return [_const(im) for im in _from_tensor(source)]
    if isinstance(source, (list, tuple)) and top:
        out: list[_Entry] = []
        for element in source:
            out.extend(_plan(element, bgr=bgr, top=False))
        return out
    if isinstance(source, (list, tuple)):
        raise SourceError("nested lists are not supported as a source; pass one flat list")
    raise SourceError(f"unsupported source type {type(source).__name__}; pass {SUPPORTED_TYPES}")


def _plan_path(source: str | Path) -> list[_Entry]:
    text = str(source)
    if not text.strip():
        raise SourceError("the source is an empty string; pass an image, video, folder or glob path")
    if _URL.match(text):
        raise SourceError(
            f"URLs and streams are not supported as sources ({text!r}); download the file and pass its path"
        )
    path = Path(text).expanduser()
    if path.is_dir():
        files = _natural_sorted(
            p for p in path.iterdir() if p.is_file() and p.suffix.lower() in IMAGE_SUFFIXES | VIDEO_SUFFIXES
        )
        if not files:
            raise SourceError(
                f"directory '{path}' contains no image or video files "
                f"(looked for {', '.join(sorted(IMAGE_SUFFIXES | VIDEO_SUFFIXES))})"
            )
        return [_file_entry(p) for p in files]
    if path.exists():
        if not path.is_file():
            raise SourceError(f"'{path}' is not a regular file")
        return [_file_entry(path)]
    if _GLOB_CHARS.search(text):
        matches = _natural_sorted(
            Path(m) for m in glob.glob(str(Path(text).expanduser()), recursive=True)
            if Path(m).is_file() and Path(m).suffix.lower() in IMAGE_SUFFIXES | VIDEO_SUFFIXES
        )
        if not matches:
            raise SourceError(f"glob pattern '{text}' matched no image or video files")
        return [_file_entry(p) for p in matches]
    raise SourceError(f"source '{text}' does not exist; check the path (relative to {Path.cwd()})")


def _file_entry(path: Path) -> _Entry:
    if path.suffix.lower() in VIDEO_SUFFIXES:
        return lambda: _read_video(path)
    return lambda: iter((SourceItem(image=read_image(path), path=str(path)),))


def _plan_array(arr: np.ndarray, *, bgr: bool) -> list[_Entry]:
    if arr.ndim == 4:
        return [_const(_from_array(a, bgr=bgr, what=f"array[{i}]")) for i, a in enumerate(arr)]
    return [_const(_from_array(arr, bgr=bgr, what="array"))]


def _const(image: np.ndarray) -> _Entry:
    return lambda: iter((SourceItem(image=image),))


def _natural_sorted(paths: Iterable[Path]) -> list[Path]:
    """Sort so that 'img2' comes before 'img10'."""

    def key(p: Path) -> list[Any]:
        return [(0, int(t), "") if t.isdigit() else (1, 0, t.lower()) for t in re.split(r"(\d+)", str(p))]

    return sorted(paths, key=key)


# ---------------------------------------------------------------------------- decoding
def read_image(path: str | Path) -> np.ndarray:
    """Decode an image file to RGB uint8 (H, W, 3); EXIF orientation applied.

    OpenCV decodes first (fast path); Pillow is the fallback for what OpenCV cannot read.

    Raises:
        SourceError: the file is missing, empty, corrupt, or not an image.
    """
    import cv2

    path = Path(path)
    try:
        data = np.fromfile(str(path), dtype=np.uint8)  # handles non-ASCII paths, unlike cv2.imread
    except OSError as e:
        raise SourceError(f"cannot read image '{path}': {e}") from e
    if data.size == 0:
        raise SourceError(f"image file '{path}' is empty")
    img = cv2.imdecode(data, cv2.IMREAD_COLOR)
    if img is not None:
        return np.ascontiguousarray(cv2.cvtColor(img, cv2.COLOR_BGR2RGB))
    try:
        from PIL import Image, ImageOps, UnidentifiedImageError

        with Image.open(path) as pil:
            pil = ImageOps.exif_transpose(pil)
            return _from_pil(pil)
    except (UnidentifiedImageError, OSError, SyntaxError, ValueError) as e:
        hint = "" if path.suffix.lower() in IMAGE_SUFFIXES else (
            f" ('{path.suffix}' is not a known image or video extension;"
            f" images: {', '.join(sorted(IMAGE_SUFFIXES))}; videos: {', '.join(sorted(VIDEO_SUFFIXES))})"
        )
        raise SourceError(f"cannot decode image '{path}': the file is corrupt or not an image{hint}") from e


def _read_video(path: Path) -> Iterator[SourceItem]:
    """Yield the frames of a video one at a time (RGB), with their 0-based index."""
    import cv2

    cap = cv2.VideoCapture(str(path))
    try:
        if not cap.isOpened():
            raise SourceError(f"cannot open video '{path}': the file is corrupt or its codec is unsupported by OpenCV")
        index = 0
        while True:
            ok, frame = cap.read()
            if not ok:
                break
            if frame.ndim == 2:
                frame = cv2.cvtColor(frame, cv2.COLOR_GRAY2RGB)
            else:
                frame = cv2.cvtColor(frame, cv2.COLOR_BGR2RGB)
            yield SourceItem(image=np.ascontiguousarray(frame), path=str(path), frame=index)
            index += 1
        if index == 0:
            raise SourceError(f"video '{path}' has no readable frames (corrupt file or unsupported codec)")
        logger.debug("read %d frames from %s", index, path)
    finally:
        cap.release()


def _from_array(arr: np.ndarray, *, bgr: bool, what: str) -> np.ndarray:
    """Validate an (H, W), (H, W, 1), (H, W, 3) or (H, W, 4) uint8 array and return RGB (H, W, 3)."""
    if arr.dtype != np.uint8:
        raise SourceError(
            f"{what} has dtype {arr.dtype}; numpy images must be uint8 in [0, 255] "
            "(for float images in [0, 1] use (a * 255).round().astype(np.uint8))"
        )
    if arr.ndim == 3 and arr.shape[2] == 1:
        arr = arr[:, :, 0]
    if arr.ndim == 2:
        rgb = np.repeat(arr[:, :, None], 3, axis=2)
    elif arr.ndim == 3 and arr.shape[2] in (3, 4):
        rgb = arr[:, :, :3]
        if bgr:
            rgb = rgb[:, :, ::-1]
    else:
        raise SourceError(
            f"{what} has shape {tuple(arr.shape)}; expected (H, W, 3) colour, (H, W) grayscale, "
            "(H, W, 4) with alpha, or (B, H, W, 3) for a batch"
        )
    if rgb.shape[0] < 1 or rgb.shape[1] < 1:
        raise SourceError(f"{what} has an empty shape {tuple(arr.shape)}")
    return np.ascontiguousarray(rgb)


def _is_pil(obj: Any) -> bool:
    try:
        from PIL import Image
    except ImportError:  # Pillow is a core dependency; without it, nothing is a PIL image
        return False
    return isinstance(obj, Image.Image)


def _from_pil(img: Any) -> np.ndarray:
    if img.mode != "RGB":
        img = img.convert("RGB")
    arr = np.asarray(img, dtype=np.uint8)
    if arr.ndim != 3 or arr.shape[0] < 1 or arr.shape[1] < 1:
        raise SourceError(f"PIL image has an unusable size {img.size}")
    return np.ascontiguousarray(arr)


def _is_tensor(obj: Any) -> bool:
    import sys

    torch = sys.modules.get("torch")  # a tensor can only exist if torch was imported
    return torch is not None and isinstance(obj, torch.Tensor)


def _from_tensor(t: Any) -> list[np.ndarray]:
    """(3, H, W) or (B, 3, H, W) RGB tensor, uint8 in [0, 255] or float in [0, 1] -> RGB arrays."""
    import torch

    shape = tuple(t.shape)
    if t.ndim == 3:
        t = t.unsqueeze(0)
    if t.ndim != 4 or t.shape[1] != 3 or t.shape[2] < 1 or t.shape[3] < 1:
        raise SourceError(
            f"tensor has shape {shape}; expected (3, H, W) or (B, 3, H, W) RGB (channels first)"
        )
    t = t.detach().cpu()
    if t.dtype == torch.uint8:
        u8 = t
    elif t.is_floating_point():
        lo, hi = float(t.min()), float(t.max())
        if not (lo >= 0.0 and hi <= 1.0):  # also rejects NaN
            raise SourceError(
                f"float tensor values span [{lo:.4g}, {hi:.4g}]; float tensors must be RGB in [0, 1] "
                "(divide by 255, or pass a uint8 tensor)"
            )
        u8 = t.float().mul(255.0).round_().to(torch.uint8)
    else:
        raise SourceError(f"tensor has dtype {t.dtype}; expected uint8 in [0, 255] or a float dtype in [0, 1]")
    hwc = u8.permute(0, 2, 3, 1).contiguous().numpy()  # (B, H, W, 3)
    return [np.ascontiguousarray(im) for im in hwc]
