"""PIDNet's training loss: the paper's four terms, with boundary targets built from the mask.

``L = 0.4 * ce(aux P head) + 1.0 * ce(main) + 20 * bce(D head, boundary) + 1.0 * ce_b(main)``

- ``ce``: pixel cross-entropy of logits upsampled bilinearly to the mask, ignored pixels
  (:data:`~libreyolo.data.semantic.IGNORE`) left out (as :class:`~.._base.semantic.SemanticLoss`).
- ``bd``: class-balanced binary cross-entropy of the D head's logit against :func:`boundary_targets`
  (a positive pixel weighs ``negatives / total``, a negative ``positives / total``; the mean over
  the labelled pixels).
- ``sb``: the boundary-aware term, the cross-entropy of the main logits restricted to the pixels
  where the D head's probability is above 0.8 (the others become ignored).

The weights (0.4, 20, 1) are the paper's lambda_0..lambda_3 and its Cityscapes configuration. No
online hard-example mining (the reference trains Cityscapes with OHEM; plain cross-entropy here).
Everything runs on the logits' device without a host sync (counts are clamped, not tested).
"""

from __future__ import annotations

from typing import Any

import torch
import torch.nn.functional as F
from torch import Tensor

from ...data.semantic import IGNORE

AUX_WEIGHT, MAIN_WEIGHT, BD_WEIGHT, SB_WEIGHT = 0.4, 1.0, 20.0, 1.0
SB_THRESHOLD = 0.8
EDGE_RADIUS = 1  # boundary pixels are dilated by a (2r + 1) square


def boundary_targets(mask: Tensor, *, radius: int = EDGE_RADIUS) -> Tensor:
    """mask Tensor[B, H, W] int class ids (IGNORE = not labelled) -> Tensor[B, H, W] float 0 / 1: 1 on
    both pixels of every horizontally or vertically adjacent labelled pair of different classes,
    dilated by a ``2 * radius + 1`` square (0 keeps the two-pixel edge).

    Example:
        >>> m = torch.zeros(1, 4, 4, dtype=torch.long); m[0, :, 2:] = 1
        >>> boundary_targets(m, radius=0)[0].int().tolist()
        [[0, 1, 1, 0], [0, 1, 1, 0], [0, 1, 1, 0], [0, 1, 1, 0]]
    """
    valid = mask != IGNORE
    edge = torch.zeros_like(mask, dtype=torch.bool)
    dx = (mask[:, :, 1:] != mask[:, :, :-1]) & valid[:, :, 1:] & valid[:, :, :-1]
    dy = (mask[:, 1:, :] != mask[:, :-1, :]) & valid[:, 1:, :] & valid[:, :-1, :]
    edge[:, :, 1:] |= dx
    edge[:, :, :-1] |= dx
    edge[:, 1:, :] |= dy
    edge[:, :-1, :] |= dy
    out = edge.float()
    if radius > 0:
        out = F.max_pool2d(out[:, None], 2 * radius + 1, 1, radius)[:, 0]
    return out


def _ce(logits: Tensor, target: Tensor) -> Tensor:
    total = F.cross_entropy(logits, target, ignore_index=IGNORE, reduction="sum")
    return total / (target != IGNORE).sum().clamp(min=1)


class PIDNetLoss:
    """``criterion(preds, batch) -> (loss, items Tensor[4])``, items = (ce, aux, bd, sb), detached.

    ``preds`` is the training tuple ``(aux, main, boundary)`` (module docstring) or, in eval mode
    (validation losses), the main logits alone: then only ``ce`` is scored and the other items are 0.
    loss = the weighted sum x B (the trainer's loss scale, as :class:`~.._base.semantic.SemanticLoss`).

    Example:
        >>> logits = torch.zeros(1, 2, 4, 4); logits[0, 1] = 5.0
        >>> loss, items = PIDNetLoss()(logits, {"mask": torch.ones(1, 4, 4, dtype=torch.long)})
        >>> round(float(items[0]), 4), items[1:].tolist()
        (0.0067, [0.0, 0.0, 0.0])
    """

    def __init__(self) -> None:
        self.hyp: dict[str, float] = {"aux": AUX_WEIGHT, "bd": BD_WEIGHT, "sb": SB_WEIGHT}

    def __call__(self, preds: Any, batch: dict[str, Any]) -> tuple[Tensor, Tensor]:
        if isinstance(preds, (list, tuple)) and len(preds) == 3:
            aux, main, bd = preds
        else:
            aux, main, bd = None, preds[0] if isinstance(preds, (list, tuple)) else preds, None
        target = batch["mask"].to(main.device, non_blocking=True).long()
        size = tuple(target.shape[1:])

        def up(x: Tensor) -> Tensor:
            return x.float() if tuple(x.shape[2:]) == size else F.interpolate(
                x.float(), size=size, mode="bilinear", align_corners=False)

        main = up(main)
        ce = _ce(main, target)
        zero = ce.new_zeros(())
        if aux is None or bd is None:
            return ce * MAIN_WEIGHT * main.shape[0], torch.stack([ce, zero, zero, zero]).detach()
        aux_ce = _ce(up(aux), target)
        bd_logit = up(bd)[:, 0]
        edge = boundary_targets(target)
        valid = (target != IGNORE).float()
        pos = (edge * valid).sum()
        n = valid.sum().clamp(min=1)
        weight = torch.where(edge > 0, (n - pos) / n, pos / n) * valid
        bce = (F.binary_cross_entropy_with_logits(bd_logit, edge, reduction="none") * weight).sum() / n
        sb_target = torch.where(torch.sigmoid(bd_logit.detach()) > SB_THRESHOLD, target,
                                torch.full_like(target, IGNORE))
        sb = _ce(main, sb_target)
        loss = MAIN_WEIGHT * ce + AUX_WEIGHT * aux_ce + BD_WEIGHT * bce + SB_WEIGHT * sb
        return loss * main.shape[0], torch.stack([ce, aux_ce, bce, sb]).detach()
