"""Drawing the prompts of a promptable-segmentation result (``Results.prompts``): foreground
points green, background points red, prompt boxes blue; nothing when the result has none."""

from __future__ import annotations

from typing import Any

import numpy as np

FG, BG, BOX = (0, 200, 0), (0, 0, 230), (230, 120, 0)  # BGR


def draw_prompts(r: Any, img: np.ndarray, *, line_width: int | None = None) -> np.ndarray:
    """``img`` (BGR uint8, the result's image size) with ``r.prompts`` drawn on a copy.

    Example:
        >>> import torch
        >>> from libreyolo.engine.results import Results
        >>> r = Results(orig_img=np.zeros((32, 32, 3), np.uint8), names={0: "object"},
        ...             prompts={"points": torch.tensor([[[8.0, 8.0]]]), "labels": torch.tensor([[1]]), "boxes": None})
        >>> bool(draw_prompts(r, r.orig_img).any())
        True
    """
    p = getattr(r, "prompts", None)
    if not p:
        return img  # nothing to draw: no OpenCV needed (plot() of a detection works without it)
    from .._cv import require_cv2

    cv2 = require_cv2("drawing prompts")
    out = img.copy()
    lw = line_width or max(1, round(sum(img.shape[:2]) / 2 * 0.003))
    if p.get("boxes") is not None:
        for b in np.asarray(p["boxes"], dtype=np.float32).reshape(-1, 4):
            cv2.rectangle(out, (int(b[0]), int(b[1])), (int(b[2]), int(b[3])), BOX, lw)
    if p.get("points") is not None:
        pts = np.asarray(p["points"], dtype=np.float32).reshape(-1, 2)
        lab = np.asarray(p["labels"]).reshape(-1) if p.get("labels") is not None else np.ones(len(pts))
        for (x, y), lb in zip(pts, lab, strict=True):
            cv2.circle(out, (int(round(x)), int(round(y))), 2 * lw + 1, FG if lb == 1 else BG, -1)
    return out
