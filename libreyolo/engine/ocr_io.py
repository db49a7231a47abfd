"""The texts of an OCR result (``Results.texts``): text polygons with their strings, drawn by
``plot()``, listed by ``summary()`` / ``to_json()``."""

from __future__ import annotations

from typing import Any

import numpy as np
import torch
from torch import Tensor

from ..errors import ConfigError

BOX, INK, BG = (0, 200, 0), (255, 255, 255), (0, 120, 0)  # BGR


class Texts:
    """polygons (Tensor[n, 4, 2] float32, original pixels, clockwise from the top-left), strings
    (list[str]), scores (Tensor[n], recognition confidence), det_scores (Tensor[n], box score),
    angles (Tensor[n] int64: the degrees each line was read turned by, 0 or 180, from an angle
    classifier; 0 where none ran) and angle_scores (Tensor[n], the classifier's probability of that
    angle; 0 where none ran).

    Example:
        >>> t = Texts(torch.zeros(1, 4, 2), ["abc"], torch.tensor([0.9]), torch.tensor([0.8]))
        >>> len(t), t.strings, t.xyxy.shape
        (1, ['abc'], torch.Size([1, 4]))
    """

    def __init__(self, polygons: Tensor, strings: list[str], scores: Tensor, det_scores: Tensor | None = None,
                 angles: Tensor | None = None, angle_scores: Tensor | None = None) -> None:
        polygons = torch.as_tensor(polygons, dtype=torch.float32).reshape(-1, 4, 2)
        if len(strings) != len(polygons):
            raise ConfigError(f"texts: {len(polygons)} polygons but {len(strings)} strings")
        self.polygons, self.strings = polygons, [str(s) for s in strings]
        n = len(polygons)
        self.scores = torch.as_tensor(scores, dtype=torch.float32).reshape(-1)
        self.det_scores = (torch.as_tensor(det_scores, dtype=torch.float32).reshape(-1) if det_scores is not None
                           else torch.zeros(n))
        self.angles = (torch.as_tensor(angles).long().reshape(-1) if angles is not None
                       else torch.zeros(n, dtype=torch.long))
        self.angle_scores = (torch.as_tensor(angle_scores, dtype=torch.float32).reshape(-1)
                             if angle_scores is not None else torch.zeros(n))
        if len(self.angles) != n or len(self.angle_scores) != n:
            raise ConfigError(f"texts: {n} polygons but {len(self.angles)} angles / {len(self.angle_scores)} "
                              "angle scores")

    def __len__(self) -> int:
        return len(self.strings)

    @property
    def xyxy(self) -> Tensor:
        """Tensor[n, 4]: each polygon's bounding box."""
        if not len(self):
            return torch.zeros(0, 4)
        return torch.cat([self.polygons.amin(1), self.polygons.amax(1)], 1)

    def to(self, device: Any) -> Texts:
        return Texts(self.polygons.to(device), self.strings, self.scores.to(device), self.det_scores.to(device),
                     self.angles.to(device), self.angle_scores.to(device))


def check_texts(value: Any) -> Texts:
    """A :class:`Texts`, or one built from a dict with keys ``polygons``, ``strings``, ``scores``
    [, ``det_scores``, ``angles``, ``angle_scores``] (what the ocr task's outputs hold)."""
    if isinstance(value, Texts):
        return value
    if isinstance(value, dict) and {"polygons", "strings", "scores"} <= set(value):
        return Texts(value["polygons"], value["strings"], value["scores"], value.get("det_scores"),
                     value.get("angles"), value.get("angle_scores"))
    raise ConfigError(f"texts must be a libreyolo.engine.ocr_io.Texts or a dict with polygons / strings / scores, "
                      f"got {type(value).__name__}")


def texts_verbose(r: Any) -> str:
    t = r.texts
    return ", ".join(repr(s) for s in t.strings) if len(t) else "no text"


def texts_summary(r: Any, *, normalize: bool, decimals: int) -> list[dict[str, Any]]:
    """One dict per region: ``{text, confidence, box_confidence, angle (degrees the line was read
    turned by), polygon: [[x, y] x 4], box: {x1..y2}}``."""
    h, w = r.orig_shape
    scale = np.array([w, h], np.float64) if normalize else np.ones(2)
    rows = []
    t = r.texts
    for poly, s, c, d, a, box in zip(t.polygons.tolist(), t.strings, t.scores.tolist(), t.det_scores.tolist(),
                                     t.angles.tolist(), t.xyxy.tolist(), strict=True):
        pts = [[round(x / scale[0], decimals), round(y / scale[1], decimals)] for x, y in poly]
        x1, y1, x2, y2 = box
        rows.append({"text": s, "confidence": round(c, decimals), "box_confidence": round(d, decimals),
                     "angle": int(a), "polygon": pts,
                     "box": {"x1": round(x1 / scale[0], decimals), "y1": round(y1 / scale[1], decimals),
                             "x2": round(x2 / scale[0], decimals), "y2": round(y2 / scale[1], decimals)}})
    return rows


def plot_texts(r: Any, *, labels: bool = True, conf: bool = True, line_width: int | None = None) -> np.ndarray:
    """The image with each polygon outlined and its string (and confidence) written above it (BGR).

    Example:
        >>> from libreyolo.engine.results import Results
        >>> t = Texts(torch.tensor([[[4.0, 4.0], [40.0, 4.0], [40.0, 20.0], [4.0, 20.0]]]), ["ab"], torch.tensor([0.9]))
        >>> r = Results(orig_img=np.zeros((48, 64, 3), np.uint8), names={0: "a"}, texts=t)
        >>> bool(r.plot().any()), r.verbose()
        (True, "'ab'")
    """
    import cv2

    img = r.orig_img.copy()
    lw = line_width or max(1, round(sum(img.shape[:2]) / 2 * 0.003))
    for poly, s, c in zip(r.texts.polygons.numpy(), r.texts.strings, r.texts.scores.tolist(), strict=True):
        cv2.polylines(img, [poly.round().astype(np.int32)], True, BOX, lw)
        if not labels:
            continue
        text = f"{s} {c:.2f}" if conf else s
        text = text.encode("ascii", "replace").decode()  # OpenCV's Hershey fonts draw ASCII only
        fs = max(0.3, lw / 3)
        (tw, th), _ = cv2.getTextSize(text, cv2.FONT_HERSHEY_SIMPLEX, fs, 1)
        x, y = int(poly[:, 0].min()), int(poly[:, 1].min())
        y = y if y - th - 3 >= 0 else int(poly[:, 1].max()) + th + 3
        cv2.rectangle(img, (x, y - th - 3), (x + tw + 2, y), BG, -1)
        cv2.putText(img, text, (x + 1, y - 2), cv2.FONT_HERSHEY_SIMPLEX, fs, INK, 1, cv2.LINE_AA)
    return img
