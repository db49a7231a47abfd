"""The pose side of :class:`~libreyolo.engine.results.Results`: :class:`Keypoints` (K keypoints
per detection, original-image pixels, with a visibility score each), their drawing in ``plot()``
(points, and the skeleton's lines when the model has one), the ``keypoints`` entries of
``summary()`` / ``to_json()`` and the pose label lines of ``save_txt()``.

A keypoint whose visibility score is below :data:`DRAW_CONF` is not drawn (nor a skeleton line
touching it); ``summary`` and ``save_txt`` list every keypoint with its score.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

import numpy as np
import torch
from torch import Tensor

from ..errors import ConfigError

if TYPE_CHECKING:
    from .results import Results

DRAW_CONF = 0.5


class Keypoints:
    """Keypoints of one image's detections.

    Args:
        data (Tensor[N, K, 3] | np.ndarray[N, K, 3]): x, y (original-image pixels), visibility score
            in [0, 1]; ``(N, K, 2)`` gets score 1.
        orig_shape: (h, w) of the image.
        skeleton: pairs ``[i, j]`` of keypoint indices joined when drawn (``None``: points only).

    Properties are computed when read, from :attr:`data`.

    Example:
        >>> k = Keypoints(torch.tensor([[[10.0, 20.0, 0.5], [30.0, 40.0, 0.25]]]), (50, 100), skeleton=[[0, 1]])
        >>> k.xy.tolist(), k.xyn.tolist(), k.conf.tolist(), k.shape, len(k)
        ([[[10.0, 20.0], [30.0, 40.0]]], [[[0.10000000149011612, 0.4000000059604645], [0.30000001192092896, 0.800000011920929]]], [[0.5, 0.25]], (1, 2, 3), 1)
    """

    def __init__(self, data: Tensor | np.ndarray, orig_shape: tuple[int, int], *,
                 skeleton: list[list[int]] | None = None) -> None:
        t = torch.from_numpy(np.asarray(data, np.float32)) if isinstance(data, np.ndarray) else data
        if not isinstance(t, Tensor) or t.ndim != 3 or t.shape[2] not in (2, 3):
            raise ConfigError(f"keypoints must be a Tensor[N, K, 3] (x, y, score), got {type(data).__name__} "
                              f"{tuple(getattr(data, 'shape', ()))}")
        t = t.float()
        if t.shape[2] == 2:
            t = torch.cat([t, torch.ones_like(t[..., :1])], 2)
        self._data = t
        self.orig_shape = (int(orig_shape[0]), int(orig_shape[1]))
        self.skeleton = [[int(a), int(b)] for a, b in skeleton] if skeleton else None
        if self.skeleton and any(not 0 <= v < t.shape[1] for p in self.skeleton for v in p):
            raise ConfigError(f"skeleton {self.skeleton} names a keypoint outside 0..{t.shape[1] - 1}")

    @property
    def data(self) -> Tensor:
        return self._data

    @property
    def xy(self) -> Tensor:
        """Tensor[N, K, 2] pixels."""
        return self._data[..., :2]

    @property
    def xyn(self) -> Tensor:
        """:attr:`xy` divided by the image width and height."""
        h, w = self.orig_shape
        return self.xy / self._data.new_tensor([w, h])

    @property
    def conf(self) -> Tensor:
        """Tensor[N, K] visibility scores."""
        return self._data[..., 2]

    @property
    def shape(self) -> tuple[int, ...]:
        return tuple(self._data.shape)

    def __len__(self) -> int:
        return int(self._data.shape[0])

    def __getitem__(self, idx: Any) -> Keypoints:
        sel = self._data[idx]
        return Keypoints(sel[None] if sel.ndim == 2 else sel, self.orig_shape, skeleton=self.skeleton)

    def cpu(self) -> Keypoints:
        return Keypoints(self._data.cpu(), self.orig_shape, skeleton=self.skeleton)

    def to(self, device: str | torch.device) -> Keypoints:
        return Keypoints(self._data.to(device), self.orig_shape, skeleton=self.skeleton)

    def numpy(self) -> np.ndarray:
        return self._data.detach().cpu().numpy()

    def __repr__(self) -> str:
        return f"Keypoints(n={len(self)}, k={self._data.shape[1]}, orig_shape={self.orig_shape})"


def as_keypoints(value: Any, orig_shape: tuple[int, int]) -> Keypoints:
    """A :class:`Keypoints` from what a task or a user passes as ``Results(keypoints=...)``: one,
    a Tensor / array [N, K, 3], or a mapping ``{"data": ..., "skeleton": ...}``."""
    if isinstance(value, Keypoints):
        if value.orig_shape != tuple(orig_shape):
            raise ConfigError(f"keypoints refer to an image of shape {value.orig_shape}, this result's is {orig_shape}")
        return value
    if isinstance(value, dict):
        return Keypoints(value["data"], orig_shape, skeleton=value.get("skeleton"))
    return Keypoints(value, orig_shape)


def add_keypoints(r: Results, rows: list[dict[str, Any]], *, normalize: bool, decimals: int) -> list[dict[str, Any]]:
    """``rows`` (one per box, from ``summary()``) with ``keypoints: {x: [...], y: [...], visible: [...]}``."""
    if r.keypoints is None:
        return rows
    xy = (r.keypoints.xyn if normalize else r.keypoints.xy).detach().cpu().tolist()
    conf = r.keypoints.conf.detach().cpu().tolist()
    for row, p, c in zip(rows, xy, conf, strict=True):
        row["keypoints"] = {"x": [round(float(v[0]), decimals) for v in p],
                            "y": [round(float(v[1]), decimals) for v in p],
                            "visible": [round(float(v), decimals) for v in c]}
    return rows


def keypoint_fields(r: Results, i: int, *, save_conf: bool) -> str:
    """The keypoint columns of detection ``i``'s pose label line: ``x y v`` per keypoint, x and y
    normalised, v = 2 (score >= 0.5) or 0; with ``save_conf`` the score instead of v."""
    if r.keypoints is None:
        return ""
    h, w = r.orig_shape
    parts = []
    for x, y, c in r.keypoints.data[i].detach().cpu().tolist():
        v = f"{c:.6g}" if save_conf else ("2" if c >= DRAW_CONF else "0")
        parts.append(f"{min(max(x / w, 0.0), 1.0):.6g} {min(max(y / h, 0.0), 1.0):.6g} {v}")
    return " " + " ".join(parts)


def draw_keypoints(r: Results, image: np.ndarray, *, line_width: int | None = None) -> np.ndarray:
    """``image`` (BGR, the size of ``r.orig_img``) with the keypoints of each detection drawn (a
    filled circle per keypoint scoring >= :data:`DRAW_CONF`, coloured by keypoint index) and the
    skeleton lines between such keypoints (the detection's class colour); a new array."""
    from .._cv import cv2
    from .plotting import class_color_bgr, default_line_width

    if r.keypoints is None or len(r.keypoints) == 0:
        return image
    out = np.ascontiguousarray(image.copy())
    lw = line_width or default_line_width(out.shape)
    radius = max(lw + 1, 2)
    cls = r.boxes._data[:, 5].long().tolist() if r.boxes is not None else [0] * len(r.keypoints)
    data = r.keypoints.data.detach().cpu().numpy()
    for kp, c in zip(data, cls, strict=False):
        ok = kp[:, 2] >= DRAW_CONF
        for a, b in r.keypoints.skeleton or []:
            if ok[a] and ok[b]:
                cv2.line(out, (int(round(kp[a, 0])), int(round(kp[a, 1]))), (int(round(kp[b, 0])), int(round(kp[b, 1]))),
                         class_color_bgr(int(c)), lw, cv2.LINE_AA)
        for j in np.nonzero(ok)[0]:
            cv2.circle(out, (int(round(kp[j, 0])), int(round(kp[j, 1]))), radius, class_color_bgr(int(j) + 7), -1,
                       cv2.LINE_AA)
    return out
