"""DEIM's training recipe on the D-FINE network: the matchability-aware loss (MAL) and dense
one-to-one matching (dense O2O).

* :func:`mal_loss`: BCE with target ``q^gamma`` on the matched class (``q`` = IoU of the matched
  prediction) and weight ``p^gamma`` on negatives (``alpha * p^gamma`` when ``alpha`` is set;
  DEIM leaves it unset), 1 on positives; DEIM uses gamma 1.5. Unlike VFL, a low-IoU match is
  not down-weighted to nothing, so it still learns to score, which matters with many matches.
* Dense O2O keeps the one-to-one Hungarian matching but raises the number of targets per image
  so that every image yields more positive matches. DEIM does it in the data pipeline (mosaic,
  mixup); :func:`dense_o2o_mosaic` is a batch-level version usable on any collated batch: it
  tiles groups of four images (each resized to half size) into one image with all their boxes.

The criterion itself is :class:`~libreyolo.models._detr.dfine_losses.DFineCriterion` with
``DFineLossConfig(cls="mal", gamma=1.5)``.
"""

from __future__ import annotations

import torch
import torch.nn.functional as F
from torch import Tensor

from ...errors import ConfigError


def mal_loss(logits: Tensor, onehot: Tensor, iou: Tensor, *, gamma: float = 1.5, alpha: float | None = None) -> Tensor:
    """Matchability-aware loss, summed (not normalised).

    logits (Tensor[B, Q, nc]); onehot (Tensor[B, Q, nc], 1 at matched (query, class)); iou
    (Tensor[B, Q, nc], the matched IoU at those entries, 0 elsewhere) -> scalar Tensor.
    """
    logits = logits.float()
    target = iou.clamp(min=0).pow(gamma) * onehot
    p = logits.sigmoid().detach()
    neg = p.pow(gamma) * (1.0 - onehot)
    weight = (alpha * neg if alpha is not None else neg) + onehot
    return F.binary_cross_entropy_with_logits(logits, target, weight=weight, reduction="sum")


def dense_o2o_mosaic(images: Tensor, batch: dict[str, Tensor]) -> tuple[Tensor, dict[str, Tensor]]:
    """Tile each group of four images into one 2x2 mosaic (every image downscaled by 2).

    images (Tensor[B, 3, H, W], B a multiple of 4, H and W even); batch: ``batch_idx`` (Tensor[N]),
    ``cls`` (Tensor[N] or [N, 1]), ``bboxes`` (Tensor[N, 4] normalised cxcywh) -> (Tensor[B/4, 3,
    H, W], batch with the boxes moved into their tile and renumbered). Image ``4k + j`` goes to
    tile ``j`` (row-major) of mosaic ``k``. Other batch keys are dropped.
    """
    b, _, h, w = images.shape
    if b % 4 or h % 2 or w % 2:
        raise ConfigError(f"dense_o2o_mosaic needs a batch size divisible by 4 and even sizes, got {tuple(images.shape)}; "
                          "drop the last incomplete batch or pad it")
    small = F.interpolate(images, size=(h // 2, w // 2), mode="bilinear", align_corners=False, antialias=True)
    small = small.view(b // 4, 2, 2, images.shape[1], h // 2, w // 2)
    mosaic = small.permute(0, 3, 1, 4, 2, 5).reshape(b // 4, images.shape[1], h, w)
    idx = batch["batch_idx"].reshape(-1).long()
    tile = idx % 4
    off = torch.stack([(tile % 2).float() * 0.5, (tile // 2).float() * 0.5], -1).to(batch["bboxes"].device)
    bx = batch["bboxes"].reshape(-1, 4).float()
    new_boxes = torch.cat([bx[:, :2] * 0.5 + off, bx[:, 2:] * 0.5], -1)
    out = {"batch_idx": (idx // 4).to(batch["batch_idx"].dtype), "cls": batch["cls"], "bboxes": new_boxes}
    return mosaic, out
