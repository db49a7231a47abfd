"""The instance-segmentation side of :class:`~libreyolo.engine.results.Results`: :class:`Masks`
(one binary mask per detection, at the original image size, and its polygons), the coloured
overlay of ``plot()`` and the ``segments`` entries of ``summary()`` / ``to_json()``.

Polygons (:attr:`Masks.xy`) are the outer contour of each mask's largest connected part, vertices
at pixel centres (original-image pixels, float32); a mask without pixels has an empty polygon.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

import numpy as np
import torch
from torch import Tensor

from ..errors import ConfigError

if TYPE_CHECKING:
    from .results import Results


class Masks:
    """Binary masks of one image's detections.

    Args:
        data (Tensor[N, H, W] | np.ndarray[N, H, W]): non-zero = inside; stored as bool.
        orig_shape: (H, W) of the image.

    Example:
        >>> m = Masks(torch.zeros(1, 6, 8, dtype=torch.bool), (6, 8))
        >>> m.data[0, 1:4, 2:6] = True
        >>> m.xy[0].tolist(), m.xyn[0][2].tolist(), len(m), m.shape
        ([[2.0, 1.0], [2.0, 3.0], [5.0, 3.0], [5.0, 1.0]], [0.625, 0.5], 1, (1, 6, 8))
    """

    def __init__(self, data: Tensor | np.ndarray, orig_shape: tuple[int, int]) -> None:
        t = torch.from_numpy(np.asarray(data)) if isinstance(data, np.ndarray) else data
        if not isinstance(t, Tensor) or t.ndim != 3:
            raise ConfigError(f"masks must be a Tensor[N, H, W], got {type(data).__name__} "
                              f"{tuple(getattr(data, 'shape', ()))}")
        if tuple(t.shape[1:]) != tuple(orig_shape):
            raise ConfigError(f"masks of shape {tuple(t.shape[1:])} do not match the image {tuple(orig_shape)}")
        self._data = t if t.dtype == torch.bool else t != 0
        self.orig_shape = (int(orig_shape[0]), int(orig_shape[1]))

    @property
    def data(self) -> Tensor:
        return self._data

    @property
    def shape(self) -> tuple[int, ...]:
        return tuple(self._data.shape)

    def __len__(self) -> int:
        return int(self._data.shape[0])

    def __getitem__(self, idx: Any) -> Masks:
        sel = self._data[idx]
        return Masks(sel[None] if sel.ndim == 2 else sel, self.orig_shape)

    def cpu(self) -> Masks:
        return Masks(self._data.cpu(), self.orig_shape)

    def to(self, device: str | torch.device) -> Masks:
        return Masks(self._data.to(device), self.orig_shape)

    @property
    def xy(self) -> list[np.ndarray]:
        """Per mask ndarray[k, 2] float32 polygon in pixels (empty (0, 2) for an empty mask)."""
        from .._cv import cv2

        out = []
        for m in self._data.detach().cpu().numpy().astype(np.uint8):
            contours, _ = cv2.findContours(m, cv2.RETR_EXTERNAL, cv2.CHAIN_APPROX_SIMPLE)
            if not contours:
                out.append(np.zeros((0, 2), np.float32))
                continue
            c = max(contours, key=lambda a: (cv2.contourArea(a), len(a)))
            out.append(c[:, 0, :].astype(np.float32))
        return out

    @property
    def xyn(self) -> list[np.ndarray]:
        """:attr:`xy` divided by the image width and height."""
        h, w = self.orig_shape
        return [p / np.array([w, h], np.float32) for p in self.xy]

    def __repr__(self) -> str:
        return f"Masks(n={len(self)}, orig_shape={self.orig_shape})"


def add_segments(r: Results, rows: list[dict[str, Any]], *, normalize: bool, decimals: int) -> list[dict[str, Any]]:
    """``rows`` (one per box, from ``summary()``) with ``segments: {x: [...], y: [...]}`` added."""
    if r.masks is None:
        return rows
    polys = r.masks.xyn if normalize else r.masks.xy
    for row, p in zip(rows, polys, strict=True):
        row["segments"] = {"x": [round(float(v), decimals) for v in p[:, 0]],
                           "y": [round(float(v), decimals) for v in p[:, 1]]}
    return rows


def overlay_masks(r: Results, image: np.ndarray, *, alpha: float = 0.45) -> np.ndarray:
    """``image`` (BGR, the size of ``r.orig_img``) blended with one colour per detection's class
    inside its mask: a new array."""
    from .plotting import class_color_bgr

    if r.masks is None or len(r.masks) == 0:
        return image
    out = image.astype(np.float32)
    cls = r.boxes._data[:, 5].long().tolist() if r.boxes is not None else [0] * len(r.masks)
    for m, c in zip(r.masks.data.cpu().numpy(), cls, strict=False):
        out[m] = out[m] * (1.0 - alpha) + np.array(class_color_bgr(int(c)), np.float32) * alpha
    return np.clip(out + 0.5, 0, 255).astype(np.uint8)
