"""Dynamic-k matching, the selection step of SimOTA (YOLOX, PicoDet), batched over images.

Given a cost and an IoU per (ground truth, anchor) pair, each ground truth takes its ``k``
cheapest anchors with ``k = max(1, int(sum of its top-``candidate_topk`` IoUs))``; an anchor
claimed by several ground truths keeps the cheapest of them. Shape-static up to the padded box
count and without host synchronisation; eager (the losses that call it are never captured).
"""

from __future__ import annotations

import torch
from torch import Tensor


@torch.no_grad()
def dynamic_k_match(cost: Tensor, ious: Tensor, *, valid: Tensor, gt_mask: Tensor,
                    candidate_topk: int) -> tuple[Tensor, Tensor, Tensor]:
    """Dynamic-k assignment of anchors to ground truths.

    cost (Tensor[B, M, A], float; ``inf`` where a pair may never match), ious (Tensor[B, M, A],
    0 for non-candidates), valid (Tensor[B, M, A], bool: pairs allowed to match), gt_mask
    (Tensor[B, M], bool: real, unpadded boxes). Returns fg (Tensor[B, A], bool), matched_gt
    (Tensor[B, A], int64 index into the padded boxes; 0 for background) and matched_iou
    (Tensor[B, A], the pair's IoU; 0 for background).

    Example:
        >>> cost = torch.tensor([[[0.0, 1.0, 2.0]]])
        >>> ious = torch.tensor([[[0.9, 0.8, 0.1]]])
        >>> fg, gt, iou = dynamic_k_match(cost, ious, valid=torch.ones(1, 1, 3, dtype=torch.bool),
        ...                               gt_mask=torch.ones(1, 1, dtype=torch.bool), candidate_topk=10)
        >>> fg.tolist()  # k = int(0.9 + 0.8 + 0.1) = 1: the cheapest anchor
        [[True, False, False]]
    """
    b, m, a = cost.shape
    dev = cost.device
    topk = min(int(candidate_topk), a)
    dynamic_k = ious.topk(topk, dim=2).values.sum(2).int().clamp(min=1) * gt_mask  # (B, M)
    cheapest = cost.topk(topk, dim=2, largest=False).indices  # (B, M, topk)
    take = torch.arange(topk, device=dev) < dynamic_k[..., None]  # (B, M, topk)
    matching = torch.zeros((b, m, a), dtype=torch.bool, device=dev).scatter_(2, cheapest, take) & valid
    # an anchor claimed by several ground truths keeps the cheapest one
    multi = matching.sum(1, keepdim=True) > 1  # (B, 1, A)
    best = torch.arange(m, device=dev)[None, :, None] == cost.argmin(1)[:, None, :]  # (B, M, A)
    matching = torch.where(multi, best, matching)
    fg = matching.any(1)  # (B, A)
    matched_gt = matching.to(torch.uint8).argmax(1)  # (B, A)
    matched_iou = ious.gather(1, matched_gt[:, None, :]).squeeze(1) * fg  # (B, A)
    return fg, matched_gt, matched_iou
