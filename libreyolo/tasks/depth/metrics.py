"""Depth metrics of a relative (affine-invariant disparity) prediction against metric depth.

The network predicts disparity up to a positive scale and a shift (:mod:`libreyolo.models._base.depth`),
so it is first **aligned per image**: the scale ``s`` and shift ``t`` that minimise
``sum (s * pred + t - 1/gt)^2`` over the pixels with ground truth (least squares in disparity,
the protocol of MiDaS and Depth Anything's zero-shot evaluation). A median-ratio scaling of depth
would not do here: it corrects a scale, not a disparity shift. The aligned disparity becomes depth
``1 / (s * pred + t)``, clamped to the image's ground-truth range ``[min gt, max gt]`` (a
non-positive aligned disparity goes to the far end). Then, over the pixels with ground truth:

- AbsRel: ``mean |d - gt| / gt``;
- RMSE: ``sqrt(mean (d - gt)^2)`` (in the dataset's depth unit);
- delta1: the share of pixels with ``max(d / gt, gt / d) < 1.25``.

Each image's values are averaged over the images that have ground truth.
"""

from __future__ import annotations

import torch
from torch import Tensor


def align_disparity(pred: Tensor, gt: Tensor) -> Tensor:
    """Depth Tensor[H, W] float32 from the relative disparity ``pred`` aligned to the ground-truth
    depth ``gt`` (0 where there is none), as in the module docstring; 0 where ``gt`` is 0.

    Example:
        >>> gt = torch.tensor([[1.0, 2.0], [4.0, 0.0]])
        >>> align_disparity(5.0 / gt.clamp(min=1) + 3.0, gt).tolist()  # any scale and shift
        [[1.0, 2.0], [4.0, 0.0]]
    """
    valid = gt > 0
    p, d = pred.double()[valid], 1.0 / gt.double()[valid]
    out = torch.zeros_like(gt, dtype=torch.float32)
    if p.numel() == 0:
        return out
    a = torch.stack([p, torch.ones_like(p)], dim=1)
    if p.numel() > 1 and float(p.max() - p.min()) > 0:
        s, t = torch.linalg.lstsq(a, d[:, None]).solution[:, 0].tolist()
    else:  # a constant prediction: only the shift is defined
        s, t = 0.0, float(d.mean())
    lo, hi = float(gt[valid].min()), float(gt[valid].max())
    disp = s * p + t
    depth = torch.where(disp > 0, 1.0 / disp.clamp(min=1e-12), torch.full_like(disp, hi)).clamp(lo, hi)
    out[valid] = depth.float()
    return out


def depth_errors(depth: Tensor, gt: Tensor) -> dict[str, float] | None:
    """``{"abs_rel", "rmse", "delta1"}`` of metric ``depth`` against ``gt`` over the pixels where
    ``gt > 0``; ``None`` without such a pixel.

    Example:
        >>> gt = torch.tensor([2.0, 4.0, 0.0, 1.0])
        >>> {k: round(v, 4) for k, v in depth_errors(torch.tensor([2.0, 4.4, 9.0, 1.0]), gt).items()}
        {'abs_rel': 0.0333, 'rmse': 0.2309, 'delta1': 1.0}
    """
    valid = gt > 0
    if not bool(valid.any()):
        return None
    d, g = depth.double()[valid].clamp(min=1e-12), gt.double()[valid]
    ratio = torch.maximum(d / g, g / d)
    return {"abs_rel": float(((d - g).abs() / g).mean()), "rmse": float(((d - g) ** 2).mean().sqrt()),
            "delta1": float((ratio < 1.25).double().mean())}
