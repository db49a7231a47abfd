"""Image files and arrays as pixels: decoding (OpenCV first, Pillow as the fallback), the
file suffixes taken as images or videos, RGB <-> BGR.

Shared by prediction sources (:mod:`libreyolo.engine.sources`) and the parity harness
(:mod:`libreyolo.graphs.parity`), so it lives on the data floor, below both.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import numpy as np

from ..errors import SourceError

IMAGE_SUFFIXES: frozenset[str] = frozenset(
    {".jpg", ".jpeg", ".png", ".bmp", ".webp", ".tif", ".tiff", ".jp2", ".pbm", ".pgm", ".ppm", ".pnm"}
)
VIDEO_SUFFIXES: frozenset[str] = frozenset(
    {".mp4", ".avi", ".mov", ".mkv", ".webm", ".m4v", ".mpg", ".mpeg", ".wmv", ".flv", ".ts", ".gif"}
)


class UnreadableFile(SourceError):
    """A source file that exists but cannot be decoded (skipped by :class:`SourceLoader`)."""

    def __init__(self, message: str, *, path: str) -> None:
        super().__init__(message)
        self.path = path


def swap_rb(image: np.ndarray) -> np.ndarray:
    """RGB <-> BGR of a C-contiguous (H, W, 3) uint8 array, as a new C-contiguous array (OpenCV's
    SIMD conversion: about 40x faster than numpy's reversed-stride copy at 640x480)."""
    try:
        import cv2
    except ImportError:
        return np.ascontiguousarray(image[:, :, ::-1])
    return cv2.cvtColor(image, cv2.COLOR_BGR2RGB)


def from_pil(img: Any) -> np.ndarray:
    if img.mode != "RGB":
        img = img.convert("RGB")
    arr = np.asarray(img, dtype=np.uint8)
    if arr.ndim != 3 or arr.shape[0] < 1 or arr.shape[1] < 1:
        raise SourceError(f"PIL image has an unusable size {img.size}")
    return np.ascontiguousarray(arr)


def read_image(path: str | Path) -> np.ndarray:
    """Decode an image file to RGB uint8 (H, W, 3); EXIF orientation applied by the Pillow fallback.

    OpenCV decodes first (fast path); Pillow is the fallback for what OpenCV cannot read.

    Raises:
        SourceError: the file is missing, empty, corrupt, or not an image.
    """
    rgb, bgr = decode_image(Path(path))
    return rgb if rgb is not None else swap_rb(bgr)


def decode_image(path: Path) -> tuple[np.ndarray, np.ndarray | None]:
    """(RGB or None, BGR or None) pixels of an image file, one of them set (OpenCV decodes to BGR,
    the Pillow fallback to RGB); :class:`UnreadableFile` when it cannot be decoded."""
    try:
        import cv2
    except ImportError:  # no OpenCV here: Pillow decodes (libreyolo._cv)
        cv2 = None
    try:
        data = np.fromfile(str(path), dtype=np.uint8)  # handles non-ASCII paths, unlike cv2.imread
    except OSError as e:
        raise UnreadableFile(f"cannot read image '{path}': {e.strerror or e}", path=str(path)) from e
    if data.size == 0:
        raise UnreadableFile(f"image file '{path}' is empty (0 bytes)", path=str(path))
    bgr = cv2.imdecode(data, cv2.IMREAD_COLOR) if cv2 is not None else None
    if bgr is not None:
        return None, bgr
    try:
        from PIL import Image, ImageOps, UnidentifiedImageError

        with Image.open(path) as pil:
            pil = ImageOps.exif_transpose(pil)
            return from_pil(pil), None
    except (UnidentifiedImageError, OSError, SyntaxError, ValueError) as e:
        hint = "" if path.suffix.lower() in IMAGE_SUFFIXES else (
            f" ('{path.suffix}' is not a known image or video extension;"
            f" images: {', '.join(sorted(IMAGE_SUFFIXES))}; videos: {', '.join(sorted(VIDEO_SUFFIXES))})"
        )
        raise UnreadableFile(f"cannot decode image '{path}': the file is corrupt or not an image{hint}",
                             path=str(path)) from e
