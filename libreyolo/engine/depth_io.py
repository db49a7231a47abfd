"""The depth side of :class:`~libreyolo.engine.results.Results`: the colour-mapped picture of
``plot()``, the one-row ``summary()`` / ``verbose()``, and the ``.npy`` file of ``save_depth()``
(kept here so that ``results.py`` stays small).

``Results.depth`` holds what the network predicts and ``Results.depth_kind`` says what that is
(:data:`DEPTH_KINDS`): ``"disparity"`` (relative inverse depth, larger = nearer: Depth Anything V2,
and the default of a hand-built result), ``"depth"`` (relative depth, larger = farther: Depth
Anything 3), ``"metric"`` (a metric network's raw value, larger = farther; metres need the focal
length: :func:`libreyolo.models.depth_anything3.metric.to_metres`) or ``"metres"``. :func:`colorize`
normalises a map per image to its 2nd-98th percentile range and maps it through OpenCV's TURBO
colour map with near = warm for every kind (a depth-like map is flipped first), so pictures of one
run are comparable in layout, not in absolute values.

Example:
    >>> colorize(np.array([[0.0, 1.0]], np.float32)).shape
    (1, 2, 3)
    >>> bool((colorize(np.array([[0.0, 1.0]]), near_is_large=False) == colorize(np.array([[1.0, 0.0]]))).all())
    True
"""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING, Any

import numpy as np
from torch import Tensor

from ..errors import ConfigError

if TYPE_CHECKING:
    from .results import Results


DEPTH_KINDS = ("disparity", "depth", "metric", "metres")  # only "disparity" is larger = nearer


def check_depth_kind(kind: str | None) -> str | None:
    """``kind`` if it is one of :data:`DEPTH_KINDS` (or ``None``: disparity), else a ConfigError."""
    if kind is not None and kind not in DEPTH_KINDS:
        raise ConfigError(f"depth_kind must be one of {', '.join(DEPTH_KINDS)}, got {kind!r}")
    return kind


def depth_kind(r: Results) -> str:
    """What ``r.depth`` holds: ``r.depth_kind``, ``"disparity"`` when unset."""
    return getattr(r, "depth_kind", None) or "disparity"


def check_depth(depth: Any, orig_shape: tuple[int, int]) -> Tensor | np.ndarray:
    """A depth map for a result of ``orig_shape``: a floating Tensor[H, W] (or ndarray)."""
    shape = tuple(getattr(depth, "shape", ()))
    floating = depth.is_floating_point() if isinstance(depth, Tensor) else (
        isinstance(depth, np.ndarray) and np.issubdtype(depth.dtype, np.floating))
    if len(shape) != 2 or not floating:
        raise ConfigError(f"depth must be a float Tensor[H, W], got {type(depth).__name__} {shape}")
    if shape != tuple(orig_shape):
        raise ConfigError(f"depth map of shape {shape} does not match the image {orig_shape}")
    return depth


def depth_array(r: Results) -> np.ndarray:
    """``r.depth`` as ndarray[H, W] float32 on the host."""
    d = r.depth
    return (d.detach().float().cpu().numpy() if isinstance(d, Tensor) else np.asarray(d, np.float32))


def depth_summary(r: Results, *, decimals: int = 5) -> list[dict[str, Any]]:
    """One row: ``{name, kind, height, width, min, max, mean, median, array}``; ``kind`` is
    :func:`depth_kind`, ``array`` the file the last :meth:`Results.save_depth` wrote, else ``None``."""
    d = depth_array(r)
    stats = {k: round(float(f(d)), decimals) for k, f in
             (("min", np.min), ("max", np.max), ("mean", np.mean), ("median", np.median))}
    path = getattr(r, "depth_path", None)
    return [{"name": r.names.get(0, "depth"), "kind": depth_kind(r), "height": int(d.shape[0]), "width": int(d.shape[1]), **stats,
             "array": str(path) if path is not None else None}]


def depth_verbose(r: Results) -> str:
    """E.g. ``"depth 0.12-3.4 (median 1.1)"`` (``"disparity ..."``, ``"metres ..."`` for those kinds)."""
    d = depth_array(r)
    word = {"disparity": "depth", "metric": "depth"}.get(depth_kind(r), depth_kind(r))
    return f"{word} {float(d.min()):.3g}-{float(d.max()):.3g} (median {float(np.median(d)):.3g})"


def colorize(depth: np.ndarray, *, near_is_large: bool = True) -> np.ndarray:
    """ndarray[H, W] float -> BGR uint8 (H, W, 3): 2nd-98th percentile range to 0-255, TURBO colour
    map, near = warm; ``near_is_large=False`` for a map where larger = farther (depth, metres)."""
    from .._cv import cv2

    d = np.nan_to_num(np.asarray(depth, np.float64))
    if not near_is_large:
        d = -d
    lo, hi = np.percentile(d, 2), np.percentile(d, 98)
    u8 = np.clip((d - lo) / max(hi - lo, 1e-12) * 255.0 + 0.5, 0, 255).astype(np.uint8)
    return cv2.applyColorMap(u8, cv2.COLORMAP_TURBO)


def plot_depth(r: Results) -> np.ndarray:
    """The colour-mapped depth (BGR, the image's size), near = warm whatever :func:`depth_kind` is."""
    return colorize(depth_array(r), near_is_large=depth_kind(r) == "disparity")


def save_depth(r: Results, file: str | Path) -> Path:
    """Write ``r.depth`` as a float32 ``.npy`` array (the format the depth datasets read)."""
    file = Path(file)
    if file.suffix.lower() != ".npy":
        raise ConfigError(f"save_depth writes a float32 .npy array; got '{file}' (use a .npy name)")
    file.parent.mkdir(parents=True, exist_ok=True)
    np.save(file, depth_array(r).astype(np.float32))
    r.depth_path = file
    return file
