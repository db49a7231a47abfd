"""Box conversions and IoU.

Conventions: ``xyxy`` = (x1, y1, x2, y2) corners, ``xywh`` = (cx, cy, w, h) centre and size;
pixels unless the name ends in ``n`` (normalised by image width/height).
"""

from __future__ import annotations

import math

import numpy as np
import torch
from torch import Tensor


def xyxy_to_xywh(boxes: Tensor) -> Tensor:
    """boxes (Tensor[..., 4]) xyxy -> (Tensor[..., 4]) cx, cy, w, h."""
    x1, y1, x2, y2 = boxes.unbind(-1)
    return torch.stack(((x1 + x2) / 2, (y1 + y2) / 2, x2 - x1, y2 - y1), dim=-1)


def xywh_to_xyxy(boxes: Tensor) -> Tensor:
    """boxes (Tensor[..., 4]) cx, cy, w, h -> (Tensor[..., 4]) xyxy."""
    cx, cy, w, h = boxes.unbind(-1)
    return torch.stack((cx - w / 2, cy - h / 2, cx + w / 2, cy + h / 2), dim=-1)


def box_iou(a: Tensor, b: Tensor, eps: float = 1e-7) -> Tensor:
    """Pairwise IoU. a (Tensor[N, 4]) xyxy, b (Tensor[M, 4]) xyxy -> (Tensor[N, M])."""
    lt = torch.maximum(a[:, None, :2], b[None, :, :2])
    rb = torch.minimum(a[:, None, 2:], b[None, :, 2:])
    inter = (rb - lt).clamp(min=0).prod(-1)
    area_a = (a[:, 2:] - a[:, :2]).clamp(min=0).prod(-1)
    area_b = (b[:, 2:] - b[:, :2]).clamp(min=0).prod(-1)
    return inter / (area_a[:, None] + area_b[None, :] - inter + eps)


def bbox_ciou(a: Tensor, b: Tensor, eps: float = 1e-7) -> Tensor:
    """Element-wise Complete-IoU of aligned boxes. a, b (Tensor[..., 4]) xyxy -> (Tensor[...])."""
    a1, a2 = a[..., :2], a[..., 2:]
    b1, b2 = b[..., :2], b[..., 2:]
    wa, ha = (a2 - a1).unbind(-1)
    wb, hb = (b2 - b1).unbind(-1)
    ha, hb = ha + eps, hb + eps
    # width * height as a plain product: ``prod(-1)``'s backward synchronises with the host
    # (it checks for zeros); the forward value is the same.
    iw, ih = (torch.minimum(a2, b2) - torch.maximum(a1, b1)).clamp(min=0).unbind(-1)
    inter = iw * ih
    union = wa * ha + wb * hb - inter + eps
    iou = inter / union
    enclose = torch.maximum(a2, b2) - torch.minimum(a1, b1)
    c2 = enclose.pow(2).sum(-1) + eps  # squared diagonal of the enclosing box
    rho2 = ((b1 + b2 - a1 - a2) ** 2).sum(-1) / 4  # squared centre distance
    v = (4 / math.pi**2) * (torch.atan(wb / hb) - torch.atan(wa / ha)).pow(2)
    with torch.no_grad():
        alpha = v / (v - iou + (1 + eps))
    return iou - (rho2 / c2 + v * alpha)


def scale_boxes(boxes: Tensor, *, ratio: float, pad: tuple[float, float], orig_shape: tuple[int, int]) -> Tensor:
    """Map xyxy boxes from letterboxed-input pixels back to original-image pixels, clipped.

    boxes (Tensor[N, 4]) xyxy in the network input; ``ratio`` and ``pad`` (left, top) as returned
    by :func:`libreyolo.ops.letterbox.letterbox_params`; orig_shape (h, w).
    """
    if boxes.device.type == "cpu" and boxes.dtype == torch.float32 and not boxes.requires_grad:
        # the predictor's host path: numpy on a few rows is ~20x cheaper than the indexed torch ops
        # below, with the same float32 arithmetic (a Python float operand is cast to float32)
        a = boxes.numpy().copy()
        h, w = orig_shape
        a[:, 0::2] -= np.float32(pad[0])
        a[:, 1::2] -= np.float32(pad[1])
        a /= np.float32(ratio)
        np.clip(a[:, 0::2], 0, w, out=a[:, 0::2])
        np.clip(a[:, 1::2], 0, h, out=a[:, 1::2])
        return torch.from_numpy(a)
    out = boxes.clone()
    out[:, [0, 2]] = (out[:, [0, 2]] - pad[0]) / ratio
    out[:, [1, 3]] = (out[:, [1, 3]] - pad[1]) / ratio
    h, w = orig_shape
    out[:, [0, 2]] = out[:, [0, 2]].clamp(0, w)
    out[:, [1, 3]] = out[:, [1, 3]].clamp(0, h)
    return out
