"""The matte side of :class:`~libreyolo.engine.results.Results`: the overlay of ``plot()``, the
one-row ``summary()`` / ``verbose()``, and the mask PNG of ``save_alpha()`` (kept here so that
``results.py`` stays small).

``Results.alpha`` is Tensor[H, W] float32 in [0, 1], the foreground's opacity per original-image
pixel. :func:`overlay` keeps the foreground as it is and blends the background towards a
dark blue tint, with the alpha = 0.5 contour drawn in white, so a picture shows what a cut-out keeps.
The mask PNG is the dataset format (8-bit, alpha x 255, rounded).

Example:
    >>> a = np.zeros((6, 6), np.float32); a[:2, :2] = 1.0
    >>> out = overlay(np.full((6, 6, 3), 200, np.uint8), a)
    >>> out[5, 5].tolist()  # background: 30 % of the pixel, 70 % of the tint
    [102, 74, 74]
"""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING, Any

import numpy as np
from torch import Tensor

from ..errors import ConfigError

if TYPE_CHECKING:
    from .results import Results

TINT = np.array([60, 20, 20], np.float32)  # BGR of the dimmed background (dark blue)


def check_alpha(alpha: Any, orig_shape: tuple[int, int]) -> Tensor | np.ndarray:
    """An alpha map for a result of ``orig_shape``: a floating Tensor[H, W] (or ndarray)."""
    shape = tuple(getattr(alpha, "shape", ()))
    floating = alpha.is_floating_point() if isinstance(alpha, Tensor) else (
        isinstance(alpha, np.ndarray) and np.issubdtype(alpha.dtype, np.floating))
    if len(shape) != 2 or not floating:
        raise ConfigError(f"alpha must be a float Tensor[H, W] in [0, 1], got {type(alpha).__name__} {shape}")
    if shape != tuple(orig_shape):
        raise ConfigError(f"alpha map of shape {shape} does not match the image {orig_shape}")
    return alpha


def alpha_array(r: Results) -> np.ndarray:
    """``r.alpha`` as ndarray[H, W] float32 in [0, 1] on the host."""
    a = r.alpha
    arr = a.detach().float().cpu().numpy() if isinstance(a, Tensor) else np.asarray(a, np.float32)
    return np.clip(arr, 0.0, 1.0)


def alpha_summary(r: Results, *, decimals: int = 5) -> list[dict[str, Any]]:
    """One row: ``{name, height, width, foreground, mean, mask}``: ``foreground`` the share of pixels
    with alpha >= 0.5, ``mask`` the PNG the last :meth:`Results.save_alpha` wrote, else ``None``."""
    a = alpha_array(r)
    path = getattr(r, "alpha_path", None)
    return [{"name": r.names.get(0, "foreground"), "height": int(a.shape[0]), "width": int(a.shape[1]),
             "foreground": round(float((a >= 0.5).mean()), decimals), "mean": round(float(a.mean()), decimals),
             "mask": str(path) if path is not None else None}]


def alpha_verbose(r: Results) -> str:
    """E.g. ``"foreground 23%"`` (the share of pixels with alpha >= 0.5)."""
    return f"foreground {float((alpha_array(r) >= 0.5).mean()) * 100:.0f}%"


def overlay(bgr: np.ndarray, alpha: np.ndarray) -> np.ndarray:
    """BGR uint8 (H, W, 3) and alpha ndarray[H, W] -> the foreground kept, the background blended
    70 % towards :data:`TINT`, the alpha = 0.5 contour in white."""
    from .._cv import cv2

    a = np.clip(np.asarray(alpha, np.float32), 0.0, 1.0)[..., None]
    dim = 0.3 * bgr.astype(np.float32) + 0.7 * TINT
    out = np.clip(a * bgr.astype(np.float32) + (1.0 - a) * dim + 0.5, 0, 255).astype(np.uint8)
    contours, _ = cv2.findContours((a[..., 0] >= 0.5).astype(np.uint8), cv2.RETR_EXTERNAL, cv2.CHAIN_APPROX_SIMPLE)
    if contours:
        cv2.drawContours(out, contours, -1, (255, 255, 255), max(1, round(min(bgr.shape[:2]) / 400)))
    return out


def plot_alpha(r: Results) -> np.ndarray:
    """The overlay of ``r.alpha`` on ``r.orig_img`` (BGR, the image's size)."""
    return overlay(r.orig_img, alpha_array(r))


def save_alpha(r: Results, file: str | Path) -> Path:
    """Write ``r.alpha`` as an 8-bit single-channel PNG (alpha x 255, rounded: the dataset format)."""
    from .._cv import cv2

    file = Path(file)
    if file.suffix.lower() != ".png":
        raise ConfigError(f"save_alpha writes an 8-bit PNG mask; got '{file}' (use a .png name)")
    file.parent.mkdir(parents=True, exist_ok=True)
    if not cv2.imwrite(str(file), np.round(alpha_array(r) * 255.0).astype(np.uint8)):
        raise ConfigError(f"could not write the mask '{file}'")
    r.alpha_path = file
    return file
