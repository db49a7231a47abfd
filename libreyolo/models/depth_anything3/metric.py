"""Metres from DA3Metric-Large: the network predicts depth for a canonical focal length of 300 px,
so the reference's metres are ``focal * raw / 300`` with ``focal`` in pixels of the image as fed to
the network. The depth task already multiplies a metric map by the letterbox ratio (network pixels
per original pixel), so for ``Results.depth`` the focal is the camera's focal length in pixels **of
the original image** (the mean of ``fx`` and ``fy`` of its intrinsics): metres =
``focal_px * Results.depth / 300``.

``LibreYOLO("LibreDepthAnything3metric_l-depth.pt")`` gives that value
(``Results.depth_kind == "metric"``); :func:`to_metres` turns such a result into metres
(``depth_kind == "metres"``). Any other result (Depth Anything V2 disparity, the relative depth of
DA3 s / b / mono_l) has no metric scale and is refused.

Example:
    >>> import numpy as np, torch
    >>> from libreyolo.engine.results import Results
    >>> r = Results(orig_img=np.zeros((2, 2, 3), np.uint8), names={0: "depth"}, depth=torch.full((2, 2), 3.0), depth_kind="metric")
    >>> m = to_metres(r, focal_px=500.0)
    >>> m.depth_kind, m.depth[0, 0].item(), r.depth[0, 0].item()
    ('metres', 5.0, 3.0)
"""

from __future__ import annotations

import math
from typing import Any

import torch

from ...errors import ConfigError

CANONICAL_FOCAL_PX = 300.0  # the focal length the metric network's output is scaled to


def to_metres(result: Any, focal_px: float) -> Any:
    """A copy of a DA3Metric-Large ``result`` whose ``depth`` is in metres
    (``focal_px * depth / 300``; ``depth_kind`` ``"metres"``); ``result`` is unchanged.

    Raises:
        ConfigError: ``result`` is not a metric depth result (``depth_kind != "metric"``), or
            ``focal_px`` is not a positive finite number.
    """
    kind = getattr(result, "depth_kind", None) if getattr(result, "depth", None) is not None else None
    if kind != "metric":
        what = "no depth map" if getattr(result, "depth", None) is None else f"depth_kind {kind or 'disparity'!r}"
        raise ConfigError(f"to_metres() needs a metric depth result (Depth Anything 3 size metric_l, "
                          f"depth_kind 'metric'); this result has {what}, which has no metric scale")
    try:
        f = float(focal_px)
    except (TypeError, ValueError):
        f = float("nan")
    if not (math.isfinite(f) and f > 0):
        raise ConfigError(f"focal_px must be the focal length in pixels of the original image (> 0), got {focal_px!r}")
    metres = torch.as_tensor(result.depth).float() * (f / CANONICAL_FOCAL_PX)
    if not isinstance(result.depth, torch.Tensor):
        metres = metres.numpy()
    return result._with(depth=metres, depth_kind="metres")
