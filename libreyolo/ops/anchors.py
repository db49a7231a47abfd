"""Anchor points, distribution-focal (DFL) box decoding and the DFL loss shared by anchor-free
heads (YOLOv9 lineage, PicoDet).

Raw head layout used by these helpers: per level ``Tensor[B, 4 * reg_max + nc, h, w]``; levels
are flattened row-major and concatenated in stride order, so anchor ``a`` of the concatenation
lines up with ``anchor_points[a]`` and ``stride_tensor[a]``.
"""

from __future__ import annotations

import torch
from torch import Tensor


def make_anchors(
    feat_shapes: list[tuple[int, int]],
    strides: list[int] | tuple[int, ...],
    *,
    offset: float = 0.5,
    device: torch.device | str = "cpu",
    dtype: torch.dtype = torch.float32,
) -> tuple[Tensor, Tensor]:
    """Grid-cell centres of every level.

    Returns anchor_points (Tensor[A, 2]) x, y in *grid units of their level* and
    stride_tensor (Tensor[A, 1]); multiply the two for input pixels.
    """
    points, strides_out = [], []
    for (h, w), s in zip(feat_shapes, strides, strict=True):
        sx = torch.arange(w, device=device, dtype=dtype) + offset
        sy = torch.arange(h, device=device, dtype=dtype) + offset
        gy, gx = torch.meshgrid(sy, sx, indexing="ij")
        points.append(torch.stack((gx, gy), -1).view(-1, 2))
        strides_out.append(torch.full((h * w, 1), float(s), device=device, dtype=dtype))
    return torch.cat(points), torch.cat(strides_out)


def flatten_levels(feats: list[Tensor]) -> Tensor:
    """[Tensor[B, C, h_i, w_i]] -> Tensor[B, C, A] with A = sum(h_i * w_i)."""
    b, c = feats[0].shape[:2]
    return torch.cat([f.reshape(b, c, -1) for f in feats], dim=2)


def dfl_expectation(reg: Tensor, reg_max: int) -> Tensor:
    """Expected distance from a discrete distribution per side.

    reg (Tensor[B, 4 * reg_max, A]) logits -> (Tensor[B, A, 4]) distances (l, t, r, b) in grid units.
    """
    b, _, a = reg.shape
    prob = reg.view(b, 4, reg_max, a).softmax(2)  # (B, 4, R, A)
    proj = torch.arange(reg_max, device=reg.device, dtype=prob.dtype).view(1, 1, reg_max, 1)
    return (prob * proj).sum(2).transpose(1, 2)  # (B, A, 4)


def dist2bbox(distance: Tensor, anchor_points: Tensor, *, xywh: bool = False) -> Tensor:
    """distance (Tensor[..., A, 4]) l, t, r, b + anchor_points (Tensor[A, 2]) -> boxes (Tensor[..., A, 4])."""
    lt, rb = distance.chunk(2, -1)
    x1y1 = anchor_points - lt
    x2y2 = anchor_points + rb
    if xywh:
        return torch.cat(((x1y1 + x2y2) / 2, x2y2 - x1y1), -1)
    return torch.cat((x1y1, x2y2), -1)


def bbox2dist(anchor_points: Tensor, bbox: Tensor, reg_max: int) -> Tensor:
    """Inverse of :func:`dist2bbox` for xyxy boxes, clamped to the DFL support [0, reg_max - 1 - 0.01]."""
    x1y1, x2y2 = bbox.chunk(2, -1)
    return torch.cat((anchor_points - x1y1, x2y2 - anchor_points), -1).clamp_(0, reg_max - 1 - 0.01)


def dfl_loss(pred_dist: Tensor, target: Tensor) -> Tensor:
    """Distribution focal loss.

    pred_dist (Tensor[..., 4, R]) logits over the R bins; target (Tensor[..., 4]) distances in
    [0, R - 1) -> (Tensor[...]) mean over the 4 sides of the cross-entropy to the two nearest
    bins, weighted by linear interpolation. One log-softmax, one gather.

    Example:
        >>> uniform = torch.zeros(1, 4, 8)  # every bin equally likely: the loss is log 8
        >>> round(float(dfl_loss(uniform, torch.full((1, 4), 2.5))), 4)
        2.0794
    """
    left = target.long()
    w_right = target - left.to(target.dtype)
    logp = pred_dist.log_softmax(-1)
    picked = logp.gather(-1, torch.stack((left, left + 1), -1))  # (..., 4, 2) = -CE to each bin
    # -(a + b) == (-a) + (-b) exactly, so this is the cross-entropy sum, negated once
    return -(picked * torch.stack((1 - w_right, w_right), -1)).sum(-1).mean(-1)
