"""DEIM's training recipe on the D-FINE network: the matchability-aware loss (MAL) and dense
one-to-one matching (dense O2O).

* :func:`mal_loss`: BCE with target ``q^gamma`` on the matched class (``q`` = IoU of the matched
  prediction) and weight ``p^gamma`` on negatives (``alpha * p^gamma`` when ``alpha`` is set;
  DEIM leaves it unset), 1 on positives; DEIM uses gamma 1.5. Unlike VFL, a low-IoU match is
  not down-weighted to nothing, so it still learns to score, which matters with many matches.
* Dense O2O keeps the one-to-one Hungarian matching but raises the number of targets per image
  so that every image yields more positive matches. DEIM does it in the data pipeline, with its
  mosaic at probability 0.5; here that is the trainer's own mosaic (``TRAIN_DEFAULTS["mosaic"]``
  of :class:`~libreyolo.models.deim.family.DEIM`), so no loss-side code is needed.

The criterion itself is :class:`~libreyolo.models._detr.dfine_losses.DFineCriterion` with
``DFineLossConfig(cls="mal", gamma=1.5)``.
"""

from __future__ import annotations

import torch.nn.functional as F
from torch import Tensor


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
