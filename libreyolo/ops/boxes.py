"""Box conversions and IoU: the one set the families, the metrics and the trackers import.

Conventions: ``xyxy`` = (x1, y1, x2, y2) corners, ``xywh`` = (cx, cy, w, h) centre and size;
pixels unless the name ends in ``n`` (normalised by image width/height). ``box_*`` are pairwise
(Tensor[N, 4] x Tensor[M, 4] -> Tensor[N, M]); ``bbox_*`` are element-wise over broadcast
Tensor[..., 4]. The conversions are torchvision's ``box_convert``; the IoUs are ours (torchvision's
``box_iou`` / ``generalized_box_iou`` have no eps and do not clamp the areas, so their numbers
differ). ``tests/unit/ops/test_box_ops_consolidated.py`` proves each equal, bit for bit, to the
formula it replaced. IoU variants whose arithmetic differs (RTMDet's and YOLOX's clamped unions)
stay with their losses: see docs/STATUS.md "Known problems".
"""

from __future__ import annotations

import math

import numpy as np
import torch
from torch import Tensor
from torchvision.ops import box_convert


def xyxy_to_xywh(boxes: Tensor) -> Tensor:
    """boxes (Tensor[..., 4]) xyxy -> (Tensor[..., 4]) cx, cy, w, h."""
    return box_convert(boxes, "xyxy", "cxcywh")


def xywh_to_xyxy(boxes: Tensor) -> Tensor:
    """boxes (Tensor[..., 4]) cx, cy, w, h -> (Tensor[..., 4]) xyxy."""
    return box_convert(boxes, "cxcywh", "xyxy")


def _inter_union(a: Tensor, b: Tensor) -> tuple[Tensor, Tensor]:
    """a, b (Tensor[..., 4]) xyxy, broadcast -> (intersection, union) areas (Tensor[...]); a box's
    area is clamped at 0 (an inverted box has none)."""
    area_a = (a[..., 2:] - a[..., :2]).clamp(min=0).prod(-1)
    area_b = (b[..., 2:] - b[..., :2]).clamp(min=0).prod(-1)
    inter = (torch.minimum(a[..., 2:], b[..., 2:]) - torch.maximum(a[..., :2], b[..., :2])).clamp(min=0).prod(-1)
    return inter, area_a + area_b - inter


def box_iou(a: Tensor, b: Tensor, eps: float = 1e-7) -> Tensor:
    """Pairwise IoU. a (Tensor[N, 4]) xyxy, b (Tensor[M, 4]) xyxy -> (Tensor[N, M])."""
    inter, union = _inter_union(a[:, None], b[None])
    return inter / (union + eps)


def bbox_giou(a: Tensor, b: Tensor, eps: float = 1e-7) -> tuple[Tensor, Tensor]:
    """Element-wise (IoU, GIoU) of aligned boxes. a, b (Tensor[..., 4]) xyxy, broadcast -> two
    Tensor[...]; GIoU in [-1, 1]."""
    inter, union = _inter_union(a, b)
    iou = inter / (union + eps)
    hull = (torch.maximum(a[..., 2:], b[..., 2:]) - torch.minimum(a[..., :2], b[..., :2])).clamp(min=0).prod(-1)
    return iou, iou - (hull - union) / (hull + eps)


def generalized_box_iou(a: Tensor, b: Tensor, eps: float = 1e-7) -> Tensor:
    """Pairwise generalized IoU. a (Tensor[N, 4]) xyxy, b (Tensor[M, 4]) xyxy -> Tensor[N, M]
    in [-1, 1]."""
    return bbox_giou(a[:, None], b[None], eps)[1]


def box_iou_np(a: np.ndarray, b: np.ndarray) -> np.ndarray:
    """Pairwise IoU in numpy, in the dtype of the inputs; 0 where the union is empty.
    a (ndarray[N, 4]) xyxy, b (ndarray[M, 4]) xyxy -> (ndarray[N, M])."""
    lt = np.maximum(a[:, None, :2], b[None, :, :2])
    rb = np.minimum(a[:, None, 2:], b[None, :, 2:])
    inter = np.clip(rb - lt, 0, None).prod(-1)
    area_a = np.clip(a[:, 2:] - a[:, :2], 0, None).prod(-1)
    area_b = np.clip(b[:, 2:] - b[:, :2], 0, None).prod(-1)
    union = area_a[:, None] + area_b[None, :] - inter
    return np.where(union > 0, inter / np.maximum(union, 1e-12), 0.0)


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


def scale_boxes_into(rows: np.ndarray, *, ratio: float, pad: tuple[float, float], orig_shape: tuple[int, int]) -> None:
    """:func:`scale_boxes` in place on the first four columns of float32 numpy ``rows`` (N, >= 4):
    the same float32 arithmetic, without building tensors (the predictor's host path).

    Example:
        >>> rows = np.array([[10, 20, 110, 220, 0.9, 0]], dtype=np.float32)
        >>> scale_boxes_into(rows, ratio=0.5, pad=(0, 10), orig_shape=(400, 300))
        >>> rows[0, :4].tolist()
        [20.0, 20.0, 220.0, 400.0]
    """
    if not rows.shape[0]:
        return
    h, w = orig_shape
    b = rows[:, :4]
    # per column the same float32 operations as scale_boxes; four ufunc calls on the (N, 4) block
    # instead of per-coordinate slices and np.clip's Python wrapper (half the host time on a few
    # rows). NaN propagates as with np.clip.
    b -= np.array((pad[0], pad[1], pad[0], pad[1]), dtype=np.float32)
    b /= np.float32(ratio)
    np.maximum(b, np.float32(0), out=b)
    np.minimum(b, np.array((w, h, w, h), dtype=np.float32), out=b)


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
