"""The point side of :class:`~libreyolo.engine.results.Results` (task ``point``): the check of
``Results.points``, the rows of ``summary()`` / ``verbose()`` and the markers of ``plot()`` (kept
here so that ``results.py`` stays small).

``Results.points`` is Tensor[n, 4] float32 on the CPU: ``x, y`` of each object's centroid in
original image pixels, ``conf``, ``cls``. ``plot()`` draws a filled disc in the class colour
(:func:`~libreyolo.engine.plotting.class_color_bgr`) with a dark outline at each point, and the
label beside it.

Example:
    >>> import numpy as np
    >>> from libreyolo.engine.results import Results
    >>> r = Results(orig_img=np.zeros((40, 60, 3), np.uint8), names={0: "circle"}, points=torch.tensor([[30.0, 20.0, 0.75, 0]]))
    >>> r.verbose(), r.summary()
    ('1 circle', [{'name': 'circle', 'class': 0, 'confidence': 0.75, 'point': {'x': 30.0, 'y': 20.0}}])
"""

from __future__ import annotations

from collections import Counter
from typing import TYPE_CHECKING, Any

import numpy as np
import torch
from torch import Tensor

from ..errors import ConfigError

if TYPE_CHECKING:
    from .results import Results


def check_points(points: Tensor | np.ndarray) -> Tensor:
    """``points`` as Tensor[n, 4] float32 (x, y, conf, cls); a wrong shape raises one line."""
    t = torch.as_tensor(points).detach().float()
    if t.ndim != 2 or t.shape[1] != 4:
        raise ConfigError(f"Results.points must be shaped (n, 4) as x, y, conf, cls; got {tuple(t.shape)}")
    return t


def _name(r: Results, c: int) -> str:
    return r.names.get(c, str(c))


def points_verbose(r: Results) -> str:
    """``"2 circles, 1 square"`` (class-id order), or ``"no points"``."""
    from .results_io import _plural

    pts = r.points.cpu()
    if len(pts) == 0:
        return "no points"
    ids = Counter(int(c) for c in pts[:, 3].tolist())
    return ", ".join(f"{n} {_plural(_name(r, c)) if n != 1 else _name(r, c)}" for c, n in sorted(ids.items()))


def points_summary(r: Results, *, normalize: bool = False, decimals: int = 5) -> list[dict[str, Any]]:
    """One row per point: ``{name, class, confidence, point: {x, y}}`` (x / y divided by the
    image width / height with ``normalize``)."""
    h, w = r.orig_shape
    out = []
    for x, y, conf, cls in r.points.cpu().tolist():
        if normalize:
            x, y = x / w, y / h
        c = int(cls)
        out.append({"name": _name(r, c), "class": c, "confidence": round(conf, decimals),
                    "point": {"x": round(x, decimals), "y": round(y, decimals)}})
    return out


def plot_points(r: Results, *, labels: bool = True, conf: bool = True, line_width: int | None = None) -> np.ndarray:
    """The original image (BGR, a new array) with a disc per point, least confident first
    (OpenCV when installed, Pillow otherwise)."""
    from .._cv import have_cv2
    from .plotting import class_color_bgr, default_line_width

    img = np.ascontiguousarray(r.orig_img.copy())
    lw = line_width or default_line_width(img.shape)
    rad = max(3, 2 * lw)
    pts = r.points.cpu().numpy()
    rows = [(int(round(float(x))), int(round(float(y))), float(cf), int(c))
            for x, y, cf, c in pts[np.argsort(pts[:, 2], kind="stable")]]
    text = [_name(r, c) + (f" {cf:.2f}" if conf else "") for _, _, cf, c in rows]
    if have_cv2():
        from .._cv import cv2

        for (x, y, _, c), t in zip(rows, text, strict=True):
            cv2.circle(img, (x, y), rad + 1, (0, 0, 0), -1, cv2.LINE_AA)
            cv2.circle(img, (x, y), rad, class_color_bgr(c), -1, cv2.LINE_AA)
            if labels:
                cv2.putText(img, t, (x + rad + 2, y + rad), cv2.FONT_HERSHEY_SIMPLEX, max(0.3, lw / 3),
                            class_color_bgr(c), max(1, lw // 2), cv2.LINE_AA)
        return img
    from PIL import Image, ImageDraw

    pil = Image.fromarray(np.ascontiguousarray(img[:, :, ::-1]))
    draw = ImageDraw.Draw(pil)
    for (x, y, _, c), t in zip(rows, text, strict=True):
        rgb = tuple(reversed(class_color_bgr(c)))
        draw.ellipse((x - rad, y - rad, x + rad, y + rad), fill=rgb, outline=(0, 0, 0))
        if labels:
            draw.text((x + rad + 2, y - rad), t, fill=rgb)
    return np.ascontiguousarray(np.asarray(pil)[:, :, ::-1])
