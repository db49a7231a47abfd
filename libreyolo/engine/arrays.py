"""In-memory images (numpy arrays, PIL images, tensors) -> C-contiguous uint8 RGB arrays (plus the
BGR pixels when the caller gave them in that order): the validation and conversion half of
:mod:`libreyolo.engine.sources`, whose module docstring states the colour convention."""

from __future__ import annotations

from typing import Any

import numpy as np

from ..data.images import from_pil as _from_pil  # noqa: F401 - used by engine.sources
from ..data.images import swap_rb  # noqa: F401 - re-exported
from ..errors import SourceError


def _from_array(arr: np.ndarray, *, bgr: bool, what: str) -> tuple[np.ndarray, np.ndarray | None]:
    """Validate an (H, W), (H, W, 1), (H, W, 3) or (H, W, 4) uint8 array.

    Returns:
        (RGB (H, W, 3) or None, BGR (H, W, 3) or None): the pixels in the order the caller gave
        them (a view, no copy, when already contiguous), the other ``None`` (made when needed:
        :attr:`SourceItem.image`); a grayscale image is the same array in both.
    """
    if arr.dtype != np.uint8:
        raise SourceError(
            f"{what} has dtype {arr.dtype}; numpy images must be uint8 in [0, 255] "
            "(for float images in [0, 1] use (a * 255).round().astype(np.uint8))"
        )
    if arr.ndim == 3 and arr.shape[2] == 1:
        arr = arr[:, :, 0]
    if arr.ndim == 2:
        if arr.shape[0] < 1 or arr.shape[1] < 1:
            raise SourceError(f"{what} has an empty shape {tuple(arr.shape)}")
        gray = np.ascontiguousarray(np.repeat(arr[:, :, None], 3, axis=2))
        return gray, gray  # the same pixels in either order
    if not (arr.ndim == 3 and arr.shape[2] in (3, 4)):
        raise SourceError(
            f"{what} has shape {tuple(arr.shape)}; expected (H, W, 3) colour, (H, W) grayscale, "
            "(H, W, 4) with alpha, or (B, H, W, 3) for a batch"
        )
    if arr.shape[0] < 1 or arr.shape[1] < 1:
        raise SourceError(f"{what} has an empty shape {tuple(arr.shape)}")
    if bgr:
        return None, np.ascontiguousarray(arr[:, :, :3])
    return np.ascontiguousarray(arr[:, :, :3]), None


def _is_pil(obj: Any) -> bool:
    try:
        from PIL import Image
    except ImportError:  # Pillow is a core dependency; without it, nothing is a PIL image
        return False
    return isinstance(obj, Image.Image)


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
