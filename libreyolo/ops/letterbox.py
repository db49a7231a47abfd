"""Letterbox resizing: scale an image to fit a square (or HxW) canvas keeping aspect ratio,
then pad. One torch implementation serves CPU and GPU, so preprocessing runs where the model is.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import torch
import torch.nn.functional as F
from torch import Tensor

PAD_VALUE = 114


@dataclass(frozen=True, kw_only=True)
class LetterboxParams:
    ratio: float
    new_shape: tuple[int, int]  # resized (h, w) before padding
    pad: tuple[float, float]  # (left, top) padding in pixels
    out_shape: tuple[int, int]  # (h, w) of the canvas


def letterbox_params(orig_shape: tuple[int, int], out_shape: tuple[int, int]) -> LetterboxParams:
    """Geometry of letterboxing an image of ``orig_shape`` (h, w) into ``out_shape`` (h, w)."""
    h0, w0 = orig_shape
    H, W = out_shape
    r = min(H / h0, W / w0)
    nh, nw = max(1, int(round(h0 * r))), max(1, int(round(w0 * r)))
    left, top = (W - nw) // 2, (H - nh) // 2
    return LetterboxParams(ratio=r, new_shape=(nh, nw), pad=(float(left), float(top)), out_shape=(H, W))


def letterbox(image: Tensor, out_shape: tuple[int, int]) -> tuple[Tensor, LetterboxParams]:
    """Letterbox one image.

    image (Tensor[3, h, w], uint8) RGB on any device -> (Tensor[3, H, W], uint8), params.
    Bilinear resize (align_corners=False), padded with 114 grey.
    """
    if image.ndim != 3 or image.shape[0] != 3:
        raise ValueError(f"letterbox expects a (3, h, w) image, got {tuple(image.shape)}")
    p = letterbox_params((int(image.shape[1]), int(image.shape[2])), out_shape)
    if p.new_shape != tuple(image.shape[1:]):
        resized = F.interpolate(image[None].float(), size=p.new_shape, mode="bilinear", align_corners=False)
        resized = resized[0].round_().clamp_(0, 255).to(torch.uint8)
    else:
        resized = image
    canvas = torch.full((3, *out_shape), PAD_VALUE, dtype=torch.uint8, device=image.device)
    left, top = int(p.pad[0]), int(p.pad[1])
    canvas[:, top : top + p.new_shape[0], left : left + p.new_shape[1]] = resized
    return canvas, p


def letterbox_shape(orig_shapes: list[tuple[int, int]], imgsz: tuple[int, int], *, stride: int,
                    rect: bool = True) -> tuple[int, int]:
    """The network input (h, w) for a batch of images of ``orig_shapes`` (h, w) at ``imgsz``.

    With ``rect`` and one image shape in the batch: the smallest stride-multiple rectangle that
    holds the image scaled to fit ``imgsz`` (a 640x480 photo at 640 runs at (480, 640), not
    (640, 640)). Otherwise (``rect=False``, or mixed shapes in a batch): ``imgsz`` itself.
    ``imgsz`` must already be stride multiples (:func:`check_imgsz`).

    Example:
        >>> letterbox_shape([(480, 640)], (640, 640), stride=32)
        (480, 640)
        >>> letterbox_shape([(1080, 1920)], (640, 640), stride=32)
        (384, 640)
    """
    if not rect or not orig_shapes or len(set(orig_shapes)) != 1:
        return imgsz
    (h0, w0), (H, W) = orig_shapes[0], imgsz
    r = min(H / h0, W / w0)
    nh, nw = max(1, int(round(h0 * r))), max(1, int(round(w0 * r)))
    return (min(H, math.ceil(nh / stride) * stride), min(W, math.ceil(nw / stride) * stride))


def letterbox_batch(images: Tensor, out_shape: tuple[int, int]) -> tuple[Tensor, LetterboxParams]:
    """Letterbox a batch of same-sized images in one resize and one pad.

    images (Tensor[B, 3, h, w], uint8, any memory format) -> (Tensor[B, 3, H, W] holding the
    values 0..255: uint8, or float32 after a resize; params). Same pixels as :func:`letterbox`
    per image: bilinear (align_corners=False) resize rounded to integers, padded with 114 grey.
    Without a resize and a pad the input is returned as it is (no copy).
    """
    p = letterbox_params((int(images.shape[2]), int(images.shape[3])), out_shape)
    x = images
    if p.new_shape != tuple(images.shape[2:]):
        x = F.interpolate(x.float(), size=p.new_shape, mode="bilinear", align_corners=False).round_().clamp_(0, 255)
    left, top = int(p.pad[0]), int(p.pad[1])
    right, bottom = out_shape[1] - p.new_shape[1] - left, out_shape[0] - p.new_shape[0] - top
    if left or top or right or bottom:
        x = F.pad(x, (left, right, top, bottom), value=float(PAD_VALUE))
    return x, p


def check_imgsz(imgsz: int | tuple[int, int] | list[int], *, stride: int) -> tuple[int, int]:
    """Validate an input size and round it up to a multiple of ``stride``; returns (h, w)."""
    from ..errors import ConfigError

    if isinstance(imgsz, bool):
        raise ConfigError(f"imgsz must be a positive int or (h, w), got {imgsz!r}")
    if isinstance(imgsz, int):
        hw = (imgsz, imgsz)
    elif isinstance(imgsz, (tuple, list)) and len(imgsz) == 2 and all(isinstance(v, int) and not isinstance(v, bool) for v in imgsz):
        hw = (int(imgsz[0]), int(imgsz[1]))
    else:
        raise ConfigError(f"imgsz must be a positive int or (h, w) pair of ints, got {imgsz!r}")
    if min(hw) < stride or max(hw) > 8192:
        raise ConfigError(f"imgsz {imgsz!r} out of range: each side must be in [{stride}, 8192]")
    return tuple(int(math.ceil(v / stride) * stride) for v in hw)  # type: ignore[return-value]
