"""The image-restoration side of :class:`~libreyolo.engine.results.Results`: the checks of
``Results.restored`` (Tensor[3, H', W'] float32 RGB in [0, 1], H' = scale x H), the picture
``save()`` writes (the restored image itself), the side-by-side of ``plot()`` (the input enlarged
to the output size with nearest-neighbour sampling, left; the restored image, right) and the
rows of ``summary()`` / ``to_json()`` (kept here so that ``results.py`` stays small).

Example:
    >>> import numpy as np, torch
    >>> from libreyolo.engine.results import Results
    >>> r = Results(orig_img=np.zeros((4, 6, 3), np.uint8), names={0: "image"}, restored=torch.ones(3, 16, 24))
    >>> to_bgr(r).shape, plot_restored(r).shape, r.verbose()
    ((16, 24, 3), (16, 48, 3), 'restored 24x16 (x4)')
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

import numpy as np
import torch
from torch import Tensor

from ..errors import ConfigError

if TYPE_CHECKING:
    from .results import Results


def check_restored(restored: Any, orig_shape: tuple[int, int]) -> Tensor:
    """A restored image for a result of ``orig_shape``: Tensor[3, k*H, k*W] float (an ndarray is
    converted), ``k`` a positive integer."""
    arr = torch.from_numpy(np.asarray(restored)) if isinstance(restored, np.ndarray) else restored
    if not isinstance(arr, Tensor) or arr.ndim != 3 or arr.shape[0] != 3 or not arr.is_floating_point():
        raise ConfigError(f"restored must be a float Tensor[3, H, W] RGB image in [0, 1], got {type(restored).__name__} "
                          f"{tuple(getattr(restored, 'shape', ()))}")
    h, w = orig_shape
    k = int(arr.shape[1]) // max(h, 1)
    if k < 1 or tuple(arr.shape[1:]) != (k * h, k * w):
        raise ConfigError(f"restored image of size {tuple(arr.shape[1:])} is no integer multiple of the image "
                          f"{orig_shape}")
    return arr


def scale_of(r: Results) -> int:
    """Output size / input size of a restored result (1 for denoising, 4 for x4 SR)."""
    return int(r.restored.shape[1]) // max(r.orig_shape[0], 1)


def to_bgr(r: Results) -> np.ndarray:
    """``r.restored`` as an 8-bit BGR picture ndarray[H', W', 3] (what ``save()`` writes)."""
    rgb = r.restored.detach().float().cpu().clamp(0, 1).mul(255).round().to(torch.uint8).permute(1, 2, 0)
    return np.ascontiguousarray(rgb.numpy()[:, :, ::-1])


def plot_restored(r: Results) -> np.ndarray:
    """Input (enlarged x scale, nearest) | restored, side by side: BGR ndarray[H', 2 W', 3]."""
    k = scale_of(r)
    left = np.repeat(np.repeat(r.orig_img, k, axis=0), k, axis=1) if k > 1 else r.orig_img
    return np.ascontiguousarray(np.concatenate([left, to_bgr(r)], axis=1))


def restore_summary(r: Results, *, decimals: int = 5) -> list[dict[str, Any]]:
    """One row: ``{name, width, height, scale, mean}`` (the restored size and mean RGB value)."""
    h, w = (int(v) for v in r.restored.shape[1:])
    mean = r.restored.detach().float().cpu().mean(dim=(1, 2)).tolist()
    return [{"name": "restored", "width": w, "height": h, "scale": scale_of(r),
             "mean": [round(float(v), decimals) for v in mean]}]


def restore_verbose(r: Results) -> str:
    """e.g. ``"restored 640x480 (x1)"``."""
    return f"restored {int(r.restored.shape[2])}x{int(r.restored.shape[1])} (x{scale_of(r)})"
