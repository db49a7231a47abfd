"""The semantic-segmentation side of :class:`~libreyolo.engine.results.Results`: the colour
overlay of ``plot()``, the per-class rows of ``summary()`` / ``verbose()``, and the index-mask
PNG of ``save_mask()`` (kept here so that ``results.py`` stays small).

Colours come from :func:`palette`: class 0 is black and every id gets a distinct colour by
spreading its bits over the three channels (the scheme of the PASCAL VOC masks), so the same
class has the same colour in every picture.

Example:
    >>> palette(3).tolist()
    [[0, 0, 0], [128, 0, 0], [0, 128, 0]]
"""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING, Any

import numpy as np
import torch
from torch import Tensor

from ..errors import ConfigError

if TYPE_CHECKING:
    from .results import Results


def palette(n: int) -> np.ndarray:
    """ndarray[n, 3] uint8 RGB colours of class ids ``0..n-1``: bit ``k`` of the id (in groups of
    three, for red, green, blue) lights bit ``7 - k // 3`` of that channel."""
    out = np.zeros((n, 3), np.uint8)
    for c in range(n):
        v, shift = c, 7
        while v and shift >= 0:
            for ch in range(3):
                out[c, ch] |= ((v >> ch) & 1) << shift
            v >>= 3
            shift -= 1
    return out


def check_semantic(semantic: Any, orig_shape: tuple[int, int]) -> Tensor | np.ndarray:
    """A class map for a result of ``orig_shape``: Tensor[H, W] (or ndarray) of integer ids."""
    arr = torch.from_numpy(np.asarray(semantic)) if isinstance(semantic, np.ndarray) else semantic
    if not isinstance(arr, Tensor) or arr.ndim != 2 or arr.is_floating_point():
        raise ConfigError(f"semantic must be an integer Tensor[H, W] of class ids, got {type(semantic).__name__} "
                          f"{tuple(getattr(semantic, 'shape', ()))}")
    if tuple(arr.shape) != tuple(orig_shape):
        raise ConfigError(f"semantic map of shape {tuple(arr.shape)} does not match the image {orig_shape}")
    return semantic


def _ids(r: Results) -> np.ndarray:
    s = r.semantic
    return s.detach().cpu().numpy() if isinstance(s, Tensor) else np.asarray(s)


def class_pixels(r: Results) -> list[tuple[int, int]]:
    """(class id, pixel count) of the classes in ``r.semantic``, most pixels first."""
    ids = _ids(r).reshape(-1).astype(np.int64)
    counts = np.bincount(ids[ids >= 0])
    order = np.argsort(-counts, kind="stable")
    return [(int(c), int(counts[c])) for c in order if counts[c]]


def semantic_summary(r: Results, *, decimals: int = 5) -> list[dict[str, Any]]:
    """One dict per class present: ``{name, class, pixels, fraction}``, most pixels first."""
    total = max(int(np.prod(r.orig_shape)), 1)
    return [{"name": r.names.get(c, str(c)), "class": c, "pixels": n, "fraction": round(n / total, decimals)}
            for c, n in class_pixels(r)]


def semantic_verbose(r: Results) -> str:
    """The five largest classes with their share of the image, e.g. ``"background 71%, circle 9%"``."""
    total = max(int(np.prod(r.orig_shape)), 1)
    return ", ".join(f"{r.names.get(c, str(c))} {100 * n / total:.0f}%" for c, n in class_pixels(r)[:5])


def plot_semantic(r: Results, *, alpha: float = 0.5) -> np.ndarray:
    """The original image (BGR) blended with the class colours: ``(1 - alpha) * image + alpha * colour``."""
    ids = _ids(r).astype(np.int64)
    colours = palette(max(len(r.names), int(ids.max(initial=0)) + 1))[:, ::-1]  # BGR
    over = colours[np.clip(ids, 0, len(colours) - 1)].astype(np.float32)
    out = r.orig_img.astype(np.float32) * (1.0 - alpha) + over * alpha
    return np.clip(out + 0.5, 0, 255).astype(np.uint8)


def save_mask(r: Results, file: str | Path) -> Path:
    """Write ``r.semantic`` as a single-channel PNG of class ids (8 bit, 16 bit past 255 classes):
    the format the datasets read (:mod:`libreyolo.data.semantic`)."""
    file = Path(file)
    if file.suffix.lower() != ".png":
        raise ConfigError(f"save_mask writes a PNG index mask; got '{file}' (use a .png name)")
    ids = _ids(r)
    arr = ids.astype(np.uint8 if int(ids.max(initial=0)) < 256 else np.uint16)
    file.parent.mkdir(parents=True, exist_ok=True)
    from .._cv import cv2

    ok, buf = cv2.imencode(".png", arr)
    if not ok:
        raise ConfigError(f"could not encode the mask for '{file}'")
    buf.tofile(str(file))
    return file
