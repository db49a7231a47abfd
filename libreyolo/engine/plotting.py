"""Drawing detections on images (OpenCV), used by :meth:`Results.plot`.

Images are BGR (OpenCV order), as ``Results.orig_img`` is; :func:`class_color` is the RGB colour
of a class and :func:`class_color_bgr` the same colour in drawing order. Detections are drawn in
ascending confidence, so where labels or boxes overlap the most confident one is on top.

Colours are generated, not tabulated: class ``c`` gets the hue ``c * φ mod 1`` (φ the golden
ratio conjugate), which spreads consecutive class ids far apart on the colour wheel, so every
class has its own stable colour however many classes a model has.
"""

from __future__ import annotations

import colorsys
from functools import lru_cache
from typing import Any

import numpy as np

_GOLDEN = 0.618033988749895


@lru_cache(maxsize=1024)
def class_color(cls: int) -> tuple[int, int, int]:
    """A distinct, stable RGB colour (0-255 ints) for class id ``cls``."""
    hue = (int(cls) * _GOLDEN + 0.08) % 1.0
    sat = 0.85 if int(cls) % 2 == 0 else 0.65
    r, g, b = colorsys.hsv_to_rgb(hue, sat, 0.95)
    return int(r * 255), int(g * 255), int(b * 255)


def class_color_bgr(cls: int) -> tuple[int, int, int]:
    """:func:`class_color` in OpenCV (B, G, R) order, for drawing on BGR images."""
    r, g, b = class_color(cls)
    return b, g, r


def _text_color(bg: tuple[int, int, int]) -> tuple[int, int, int]:
    """Black or white, whichever reads better on the BGR colour ``bg`` (relative luminance)."""
    luminance = 0.114 * bg[0] + 0.587 * bg[1] + 0.299 * bg[2]
    return (0, 0, 0) if luminance > 150 else (255, 255, 255)


def default_line_width(shape: tuple[int, ...]) -> int:
    """Outline width in pixels: about 0.3% of the mean side, at least 2 (1 below 64 px)."""
    h, w = shape[:2]
    if min(h, w) < 64:
        return 1
    return max(round((h + w) / 2 * 0.003), 2)


def draw_detections(
    image: np.ndarray,
    *,
    xyxy: np.ndarray,
    cls: np.ndarray,
    conf: np.ndarray | None,
    names: dict[int, str],
    labels: bool = True,
    line_width: int | None = None,
    order_by: np.ndarray | None = None,
    ids: np.ndarray | None = None,
) -> np.ndarray:
    """Draw boxes and labels on a copy of ``image``, least confident first (the most confident on top).

    Args:
        image (np.ndarray[H, W, 3], uint8): BGR image (OpenCV order); not modified.
        xyxy (np.ndarray[N, 4], float): boxes in image pixels.
        cls (np.ndarray[N]): class ids.
        conf (np.ndarray[N] | None): confidences shown after the name, or ``None`` to hide them;
            the drawing order follows ``order_by`` (by default these confidences).
        names: class id -> name (missing ids are shown as the number).
        labels: draw the name/confidence label above each box.
        line_width: box outline thickness in pixels; ``None`` scales with the image.
        order_by (np.ndarray[N] | None): draw in ascending order of these scores (the last drawn
            wins where labels overlap); defaults to ``conf``, else the given order.
        ids (np.ndarray[N] | None): track ids; when given, each box is coloured by its id (so a
            track keeps its colour across frames) and its label starts with ``id:<n>``.

    Returns:
        np.ndarray[H, W, 3], uint8: the annotated BGR image.

    Example:
        >>> img = draw_detections(np.zeros((64, 64, 3), np.uint8), xyxy=np.array([[8, 8, 40, 40]]),
        ...                       cls=np.array([0]), conf=np.array([0.9]), names={0: "circle"})
        >>> img.shape, bool(img.any())
        ((64, 64, 3), True)
    """
    try:
        import cv2
    except ImportError:  # no OpenCV: the same boxes and labels drawn with Pillow
        return _draw_pil(image, xyxy=xyxy, cls=cls, conf=conf, names=names, labels=labels,
                         line_width=line_width, order_by=order_by, ids=ids)

    out = np.ascontiguousarray(image.copy())
    h, w = out.shape[:2]
    lw = int(line_width) if line_width else default_line_width(out.shape)
    font_scale = max(lw / 3.0, 0.35)
    font_thickness = max(lw - 1, 1)
    scores = order_by if order_by is not None else conf
    order = np.argsort(np.asarray(scores, dtype=np.float64), kind="stable") if scores is not None else range(len(xyxy))
    for i in order:
        c = int(cls[i])
        color = class_color_bgr(int(ids[i]) if ids is not None else c)
        x1, y1, x2, y2 = (int(round(float(v))) for v in xyxy[i])
        x1, x2 = max(0, min(x1, w - 1)), max(0, min(x2, w - 1))
        y1, y2 = max(0, min(y1, h - 1)), max(0, min(y2, h - 1))
        cv2.rectangle(out, (x1, y1), (x2, y2), color, thickness=lw, lineType=cv2.LINE_AA)
        if not labels:
            continue
        text = names.get(c, str(c))
        if ids is not None:
            text = f"id:{int(ids[i])} {text}"
        if conf is not None:
            text = f"{text} {float(conf[i]):.2f}"
        (tw, th), baseline = cv2.getTextSize(text, cv2.FONT_HERSHEY_SIMPLEX, font_scale, font_thickness)
        pad = max(lw // 2, 1)
        box_h = th + baseline + 2 * pad
        # Above the box when there is room, otherwise just inside its top edge.
        top = y1 - box_h if y1 - box_h >= 0 else y1
        left = min(x1, max(w - tw - 2 * pad, 0))
        cv2.rectangle(out, (left, top), (left + tw + 2 * pad, top + box_h), color, thickness=-1)
        cv2.putText(out, text, (left + pad, top + pad + th), cv2.FONT_HERSHEY_SIMPLEX, font_scale,
                    _text_color(color), font_thickness, lineType=cv2.LINE_AA)
    return out


def _label(names: dict[int, str], c: int, i: int, ids: Any, conf: Any) -> str:
    text = names.get(c, str(c))
    if ids is not None:
        text = f"id:{int(ids[i])} {text}"
    if conf is not None:
        text = f"{text} {float(conf[i]):.2f}"
    return text


def _draw_pil(image: np.ndarray, *, xyxy: Any, cls: Any, conf: Any, names: dict[int, str], labels: bool,
              line_width: int | None, order_by: Any, ids: Any) -> np.ndarray:
    """:func:`draw_detections` without OpenCV (Pillow's default bitmap font; same colours, order
    and clipping)."""
    from PIL import Image, ImageDraw

    h, w = image.shape[:2]
    lw = int(line_width) if line_width else default_line_width(image.shape)
    pil = Image.fromarray(np.ascontiguousarray(image[:, :, ::-1]))  # BGR -> RGB for Pillow
    draw = ImageDraw.Draw(pil)
    scores = order_by if order_by is not None else conf
    order = np.argsort(np.asarray(scores, dtype=np.float64), kind="stable") if scores is not None else range(len(xyxy))
    for i in order:
        c = int(cls[i])
        b, g, r = class_color_bgr(int(ids[i]) if ids is not None else c)
        x1, y1, x2, y2 = (int(round(float(v))) for v in xyxy[i])
        x1, x2 = max(0, min(x1, w - 1)), max(0, min(x2, w - 1))
        y1, y2 = max(0, min(y1, h - 1)), max(0, min(y2, h - 1))
        draw.rectangle((x1, y1, x2, y2), outline=(r, g, b), width=lw)
        if not labels:
            continue
        text = _label(names, c, i, ids, conf)
        left, top, right, bottom = draw.textbbox((0, 0), text)
        tw, th = right - left, bottom - top
        pad = max(lw // 2, 1)
        box_h = th + 2 * pad
        ty = y1 - box_h if y1 - box_h >= 0 else y1
        tx = min(x1, max(w - tw - 2 * pad, 0))
        draw.rectangle((tx, ty, tx + tw + 2 * pad, ty + box_h), fill=(r, g, b))
        tb, tg, tr = _text_color((b, g, r))
        draw.text((tx + pad - left, ty + pad - top), text, fill=(tr, tg, tb))
    return np.ascontiguousarray(np.asarray(pil)[:, :, ::-1])
