"""Box-consistent augmentation for detection training (numpy + OpenCV, HWC uint8 RGB images).

Boxes travel as ``ndarray[n, 4]`` float xyxy *pixels* of the current image, with their classes in
a parallel ``ndarray[n]``; every function that moves pixels moves the boxes with the same
geometry. All randomness comes from an explicit ``numpy.random.Generator``, so a result is a
pure function of its inputs and that generator's seed.
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from dataclasses import dataclass, fields
from typing import Any

import numpy as np

from .._cv import cv2
from ..errors import ConfigError, check_keys
from ..ops.letterbox import PAD_VALUE, letterbox_params


@dataclass(frozen=True, kw_only=True)
class AugmentConfig:
    """Training augmentation hyper-parameters.

    mosaic: probability of a 4-image mosaic; mixup: probability that a mosaic is blended with a
    second one (weight ~ Beta(32, 32), both box sets kept); degrees: max rotation (deg); translate: max shift
    as a fraction of the output size; scale: zoom gain range ``1 +- scale``; shear: max shear
    (deg); perspective: max perspective coefficient; fliplr/flipud: flip probabilities;
    hsv_h/hsv_s/hsv_v: max relative hue/saturation/value gains; close_mosaic: number of final
    epochs trained without mosaic (read by the trainer); min_box_px: boxes narrower or lower
    than this after augmentation are dropped; min_area_ratio: boxes that keep less than this
    fraction of their (scaled) area after clipping are dropped.
    """

    mosaic: float = 1.0
    mixup: float = 0.0
    degrees: float = 0.0
    translate: float = 0.1
    scale: float = 0.5
    shear: float = 0.0
    perspective: float = 0.0
    fliplr: float = 0.5
    flipud: float = 0.0
    hsv_h: float = 0.015
    hsv_s: float = 0.7
    hsv_v: float = 0.4
    close_mosaic: int = 10
    min_box_px: float = 2.0
    min_area_ratio: float = 0.1

    def __post_init__(self) -> None:
        for name in ("mosaic", "mixup", "fliplr", "flipud", "translate", "hsv_h", "hsv_s", "hsv_v", "min_area_ratio"):
            v = getattr(self, name)
            if isinstance(v, bool) or not isinstance(v, (int, float)) or not 0.0 <= v <= 1.0:
                raise ConfigError(f"augmentation '{name}' must be a number in [0, 1], got {v!r}")
        for name in ("degrees", "shear", "perspective", "min_box_px"):
            v = getattr(self, name)
            if isinstance(v, bool) or not isinstance(v, (int, float)) or v < 0:
                raise ConfigError(f"augmentation '{name}' must be a number >= 0, got {v!r}")
        if isinstance(self.scale, bool) or not isinstance(self.scale, (int, float)) or not 0 <= self.scale < 1:
            raise ConfigError(f"augmentation 'scale' must be a number in [0, 1), got {self.scale!r}")
        if isinstance(self.close_mosaic, bool) or not isinstance(self.close_mosaic, int) or self.close_mosaic < 0:
            raise ConfigError(f"augmentation 'close_mosaic' must be an int >= 0, got {self.close_mosaic!r}")

    @classmethod
    def from_dict(cls, values: Mapping[str, Any]) -> AugmentConfig:
        """Build from a mapping; unknown keys raise :class:`ConfigError` with a suggestion."""
        check_keys(values, [f.name for f in fields(cls)], what="augmentation")
        return cls(**dict(values))


# ---------------------------------------------------------------------------------------------
# geometry
# ---------------------------------------------------------------------------------------------
def letterbox_image(img: np.ndarray, boxes: np.ndarray, out_shape: tuple[int, int]
                    ) -> tuple[np.ndarray, np.ndarray, float, tuple[float, float]]:
    """Resize keeping aspect ratio into ``out_shape`` (h, w) and pad with grey 114.

    Same geometry as :func:`libreyolo.ops.letterbox.letterbox_params` (integer padding).
    Returns (image, boxes xyxy px, ratio, (pad_left, pad_top)): ``x_out = x_in * ratio + pad``.
    """
    img_h, img_w = img.shape[:2]
    p = letterbox_params((img_h, img_w), out_shape)
    nh, nw = p.new_shape
    if (nh, nw) != img.shape[:2]:
        interp = cv2.INTER_AREA if p.ratio < 1 else cv2.INTER_LINEAR
        img = cv2.resize(img, (nw, nh), interpolation=interp)
    left, top = int(p.pad[0]), int(p.pad[1])
    out = np.full((*out_shape, 3), PAD_VALUE, np.uint8)
    out[top : top + nh, left : left + nw] = img
    sx, sy = nw / img_w, nh / img_h  # exact per-axis scale of the resize
    b = boxes.astype(np.float64).copy()
    b[:, [0, 2]] = b[:, [0, 2]] * sx + left
    b[:, [1, 3]] = b[:, [1, 3]] * sy + top
    return out, b, float(p.ratio), (float(left), float(top))


def filter_boxes(before: np.ndarray, after: np.ndarray, *, gain: float, min_px: float,
                 min_area_ratio: float, max_aspect: float = 100.0) -> np.ndarray:
    """Boolean keep-mask of boxes after a transform: big enough, not mostly cut away, not slivers."""
    w0, h0 = before[:, 2] - before[:, 0], before[:, 3] - before[:, 1]
    w1, h1 = after[:, 2] - after[:, 0], after[:, 3] - after[:, 1]
    aspect = np.maximum(w1 / (h1 + 1e-9), h1 / (w1 + 1e-9))
    ratio = (w1 * h1) / (w0 * h0 * gain * gain + 1e-9)
    return (w1 > min_px) & (h1 > min_px) & (ratio > min_area_ratio) & (aspect < max_aspect)


def affine_matrix(rng: np.random.Generator, *, in_shape: tuple[int, int], out_shape: tuple[int, int],
                  hyp: AugmentConfig) -> tuple[np.ndarray, float]:
    """A random 3x3 transform taking the input centre to the (randomly shifted) output centre.

    Returns (M, zoom gain). Order: centre -> perspective -> rotate/zoom -> shear -> translate.
    """
    ih, iw = in_shape
    oh, ow = out_shape
    C = np.eye(3)
    C[0, 2], C[1, 2] = -iw / 2, -ih / 2
    P = np.eye(3)
    P[2, 0] = rng.uniform(-hyp.perspective, hyp.perspective)
    P[2, 1] = rng.uniform(-hyp.perspective, hyp.perspective)
    angle = rng.uniform(-hyp.degrees, hyp.degrees)
    gain = rng.uniform(1 - hyp.scale, 1 + hyp.scale)
    R = np.eye(3)
    R[:2] = cv2.getRotationMatrix2D((0.0, 0.0), angle, gain)
    S = np.eye(3)
    S[0, 1] = math.tan(math.radians(rng.uniform(-hyp.shear, hyp.shear)))
    S[1, 0] = math.tan(math.radians(rng.uniform(-hyp.shear, hyp.shear)))
    T = np.eye(3)
    T[0, 2] = rng.uniform(0.5 - hyp.translate, 0.5 + hyp.translate) * ow
    T[1, 2] = rng.uniform(0.5 - hyp.translate, 0.5 + hyp.translate) * oh
    return T @ S @ R @ P @ C, float(gain)


def transform_boxes(boxes: np.ndarray, M: np.ndarray, out_shape: tuple[int, int]) -> np.ndarray:
    """xyxy boxes through 3x3 ``M``: the axis-aligned hull of the 4 moved corners, clipped."""
    n = len(boxes)
    if n == 0:
        return boxes.reshape(0, 4).astype(np.float64)
    corners = np.ones((n * 4, 3))
    corners[:, :2] = boxes[:, [0, 1, 2, 3, 0, 3, 2, 1]].reshape(n * 4, 2)
    moved = corners @ M.T
    moved = moved[:, :2] / moved[:, 2:3]
    moved = moved.reshape(n, 8)
    xs, ys = moved[:, 0::2], moved[:, 1::2]
    out = np.stack([xs.min(1), ys.min(1), xs.max(1), ys.max(1)], 1)
    out[:, [0, 2]] = out[:, [0, 2]].clip(0, out_shape[1])
    out[:, [1, 3]] = out[:, [1, 3]].clip(0, out_shape[0])
    return out


def random_affine(img: np.ndarray, boxes: np.ndarray, cls: np.ndarray, rng: np.random.Generator, *,
                  out_shape: tuple[int, int], hyp: AugmentConfig
                  ) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Random rotate/zoom/shear/translate(/perspective) of ``img`` into ``out_shape`` (h, w).

    Boxes are moved, clipped to the output and filtered (see :func:`filter_boxes`).
    Returns (image, boxes xyxy px, cls).
    """
    M, gain = affine_matrix(rng, in_shape=img.shape[:2], out_shape=out_shape, hyp=hyp)
    dsize = (out_shape[1], out_shape[0])
    fill = (PAD_VALUE, PAD_VALUE, PAD_VALUE)
    if hyp.perspective:
        out = cv2.warpPerspective(img, M, dsize, borderValue=fill)
    else:
        out = cv2.warpAffine(img, M[:2], dsize, flags=cv2.INTER_LINEAR, borderValue=fill)
    moved = transform_boxes(boxes, M, out_shape)
    keep = filter_boxes(boxes, moved, gain=gain, min_px=hyp.min_box_px, min_area_ratio=hyp.min_area_ratio)
    return out, moved[keep], cls[keep]


def mosaic4(images: list[np.ndarray], boxes: list[np.ndarray], classes: list[np.ndarray],
            rng: np.random.Generator, *, size: int) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Tile 4 images around a random centre of a ``2*size`` square grey canvas.

    Image k takes quadrant k (top-left, top-right, bottom-left, bottom-right), its corner at the
    centre; parts beyond the canvas are cut and boxes clipped with them.
    Returns (canvas (2*size, 2*size, 3), boxes xyxy px, cls).
    """
    s2 = 2 * size
    xc = int(rng.uniform(size * 0.5, size * 1.5))
    yc = int(rng.uniform(size * 0.5, size * 1.5))
    canvas = np.full((s2, s2, 3), PAD_VALUE, np.uint8)
    all_boxes, all_cls = [], []
    for k, (img, b, c) in enumerate(zip(images, boxes, classes, strict=True)):
        h, w = img.shape[:2]
        x0 = xc - w if k in (0, 2) else xc  # image placement on the canvas (may be negative)
        y0 = yc - h if k in (0, 1) else yc
        cx1, cy1 = max(x0, 0), max(y0, 0)
        cx2, cy2 = min(x0 + w, s2), min(y0 + h, s2)
        canvas[cy1:cy2, cx1:cx2] = img[cy1 - y0 : cy2 - y0, cx1 - x0 : cx2 - x0]
        moved = b.astype(np.float64).copy()
        moved[:, [0, 2]] = (moved[:, [0, 2]] + x0).clip(cx1, cx2)
        moved[:, [1, 3]] = (moved[:, [1, 3]] + y0).clip(cy1, cy2)
        keep = (moved[:, 2] > moved[:, 0]) & (moved[:, 3] > moved[:, 1])
        all_boxes.append(moved[keep])
        all_cls.append(c[keep])
    return canvas, np.concatenate(all_boxes).reshape(-1, 4), np.concatenate(all_cls)


def paste_resized(canvas: np.ndarray, img: np.ndarray, nw: int, nh: int, ox: int, oy: int) -> None:
    """Resize ``img`` to (nw, nh) and paste it on ``canvas`` with its top-left corner at (ox, oy),
    in place; what falls outside the canvas is cut."""
    h, w = img.shape[:2]
    resized = cv2.resize(img, (nw, nh), interpolation=cv2.INTER_LINEAR) if (nh, nw) != (h, w) else img
    H, W = canvas.shape[:2]
    x0, y0, x1, y1 = max(ox, 0), max(oy, 0), min(ox + nw, W), min(oy + nh, H)
    if x1 > x0 and y1 > y0:
        canvas[y0:y1, x0:x1] = resized[y0 - oy:y1 - oy, x0 - ox:x1 - ox]


def mosaic_tiles(rng: np.random.Generator, *, size: int, first: int, count: int, scale: tuple[float, float],
                 load: Any) -> list[tuple[Any, int, int, int, int]]:
    """The random layout of a 2 x 2 mosaic on a ``2 * size`` canvas (instance segmentation, pose):
    a centre drawn in [size / 2, 3 size / 2], three more items drawn from ``range(count)`` after
    ``first``, each loaded (``load(j)``, whose first element is its image) and scaled to a long
    side of ``size`` times a factor drawn from ``scale``, tile k (top-left, top-right, bottom-left,
    bottom-right) with its corner at the centre. Returns per tile (loaded item, nw, nh, ox, oy)."""
    xc, yc = (int(v) for v in rng.integers(size // 2, 3 * size // 2 + 1, 2))
    picks = [first, *(int(v) for v in rng.integers(0, count, 3))]
    tiles = []
    for k, j in enumerate(picks):
        item = load(j)
        h, w = item[0].shape[:2]
        r = size / max(h, w) * rng.uniform(*scale)
        nh, nw = max(1, int(round(h * r))), max(1, int(round(w * r)))
        tiles.append((item, nw, nh, xc - nw if k in (0, 2) else xc, yc - nh if k in (0, 1) else yc))
    return tiles


# ---------------------------------------------------------------------------------------------
# photometric and flips
# ---------------------------------------------------------------------------------------------
def hsv_jitter(img: np.ndarray, rng: np.random.Generator, *, h: float, s: float, v: float) -> np.ndarray:
    """Random hue/saturation/value gains ``1 + U(-g, g)`` applied with lookup tables (RGB in/out)."""
    if not (h or s or v):
        return img
    gh, gs, gv = rng.uniform(-1, 1, 3) * (h, s, v) + 1
    hsv = cv2.cvtColor(img, cv2.COLOR_RGB2HSV)
    x = np.arange(256, dtype=np.float64)
    lut_h = np.mod(x * gh, 180).astype(np.uint8)  # OpenCV 8-bit hue spans 0..179
    lut_s = np.clip(x * gs, 0, 255).astype(np.uint8)
    lut_v = np.clip(x * gv, 0, 255).astype(np.uint8)
    ch, cs, cv = cv2.split(hsv)
    hsv = cv2.merge((cv2.LUT(ch, lut_h), cv2.LUT(cs, lut_s), cv2.LUT(cv, lut_v)))
    return cv2.cvtColor(hsv, cv2.COLOR_HSV2RGB)


def flip(img: np.ndarray, boxes: np.ndarray, *, horizontal: bool) -> tuple[np.ndarray, np.ndarray]:
    """Mirror the image left-right (``horizontal``) or top-bottom, with its boxes."""
    h, w = img.shape[:2]
    b = boxes.astype(np.float64).copy()
    if horizontal:
        b[:, [0, 2]] = w - boxes[:, [2, 0]]
        return np.ascontiguousarray(img[:, ::-1]), b
    b[:, [1, 3]] = h - boxes[:, [3, 1]]
    return np.ascontiguousarray(img[::-1]), b


def photometric_and_flips(img: np.ndarray, boxes: np.ndarray, rng: np.random.Generator, *,
                          hyp: AugmentConfig) -> tuple[np.ndarray, np.ndarray]:
    """HSV jitter, then random up-down and left-right flips."""
    img = hsv_jitter(img, rng, h=hyp.hsv_h, s=hyp.hsv_s, v=hyp.hsv_v)
    if rng.random() < hyp.flipud:
        img, boxes = flip(img, boxes, horizontal=False)
    if rng.random() < hyp.fliplr:
        img, boxes = flip(img, boxes, horizontal=True)
    return img, boxes
