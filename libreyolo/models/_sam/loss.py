"""Mask-decoder fine-tuning loss: focal + dice on the mask logits, MSE on the IoU prediction
(the SAM paper's recipe: focal : dice = 20 : 1, IoU head trained with MSE against the mask's IoU).

``criterion(raw, batch) -> (loss, items)``: ``raw`` the training forward's outputs (their last
element the image embeddings Tensor[B, C, h, w]; the image encoder is normally frozen);
``batch`` a segmentation batch (``batch_idx``, ``bboxes`` normalised cx cy w h, ``masks``
Tensor[N, S/4, S/4] per instance). Every instance is one prompt: its box. The prompt path runs
here, eagerly (the seam: the captured part of a step is the image encoder).
"""

from __future__ import annotations

from typing import Any

import torch
import torch.nn.functional as F
from torch import Tensor

from .prompt import Prompts

FOCAL_WEIGHT = 20.0
DICE_WEIGHT = 1.0
IOU_WEIGHT = 1.0


def focal_loss(logits: Tensor, target: Tensor, *, alpha: float = 0.25, gamma: float = 2.0) -> Tensor:
    """Sigmoid focal loss per mask, averaged over pixels: Tensor[N, H, W] -> Tensor[N]."""
    p = logits.sigmoid()
    ce = F.binary_cross_entropy_with_logits(logits, target, reduction="none")
    pt = p * target + (1 - p) * (1 - target)
    w = alpha * target + (1 - alpha) * (1 - target)
    return (w * ce * (1 - pt) ** gamma).flatten(1).mean(1)


def dice_loss(logits: Tensor, target: Tensor) -> Tensor:
    """1 - soft dice per mask: Tensor[N, H, W] -> Tensor[N]."""
    p = logits.sigmoid().flatten(1)
    t = target.flatten(1)
    return 1 - (2 * (p * t).sum(1) + 1) / (p.sum(1) + t.sum(1) + 1)


def mask_iou(pred: Tensor, target: Tensor) -> Tensor:
    """IoU of boolean masks Tensor[N, H, W] pairwise by row -> Tensor[N] (empty union: 1).

    Example:
        >>> a = torch.zeros(1, 4, 4, dtype=torch.bool); a[0, :2] = True
        >>> b = torch.zeros(1, 4, 4, dtype=torch.bool); b[0, :, :2] = True
        >>> mask_iou(a, b).tolist()  # 4 shared pixels of 12
        [0.3333333432674408]
    """
    inter = (pred & target).flatten(1).sum(1).float()
    union = (pred | target).flatten(1).sum(1).float()
    return torch.where(union > 0, inter / union.clamp(min=1), torch.ones_like(union))


class PromptLoss:
    def __init__(self, family: Any) -> None:
        self.family = family
        self.hyp: dict[str, float] = {"focal": FOCAL_WEIGHT, "dice": DICE_WEIGHT, "iou": IOU_WEIGHT}

    def __call__(self, raw: Any, batch: dict[str, Any]) -> tuple[Tensor, Tensor]:
        from .family import box_prompts

        emb = raw[-1] if isinstance(raw, (list, tuple)) else raw
        b = emb.shape[0]
        size = int(emb.shape[2]) * 16
        idx = batch["batch_idx"].to(emb.device).long()
        target = batch["masks"].to(emb.device).float()
        zero = emb.sum() * 0.0
        focal = dice = iou_l = zero
        n = 0
        for i in range(b):  # one image's instances are its prompts
            sel = idx == i
            if not bool(sel.any()):
                continue
            boxes = box_prompts(batch["bboxes"].to(emb.device)[sel], size)
            masks, iou = self.family.decode_prompts(emb[i:i + 1], Prompts(boxes=boxes))
            logits = masks[0, :, 0].float()  # (P, h, w)
            t = target[sel]
            if tuple(t.shape[1:]) != tuple(logits.shape[1:]):
                t = F.interpolate(t[:, None], size=tuple(logits.shape[1:]), mode="nearest")[:, 0]
            true_iou = mask_iou(logits.detach() > 0, t > 0.5)
            focal = focal + focal_loss(logits, t).sum()
            dice = dice + dice_loss(logits, t).sum()
            iou_l = iou_l + F.mse_loss(iou[0, :, 0].float(), true_iou, reduction="sum")
            n += int(sel.sum())
        n = max(n, 1)
        items = torch.stack([focal / n, dice / n, iou_l / n]).detach()
        loss = (self.hyp["focal"] * focal + self.hyp["dice"] * dice + self.hyp["iou"] * iou_l) / n
        return loss * b, items
