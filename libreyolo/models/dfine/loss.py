"""D-FINE training criterion: VFL (1) + L1 (5) + GIoU (2) + FGL (0.15) + DDF (1.5) with GO-LSD
union matching (implementation and scaling in :mod:`libreyolo.models._detr.dfine_losses`:
``loss = items.sum() * batch_size``)."""

from __future__ import annotations

from torch import nn

from .._detr.dfine_losses import DFineLossConfig, DFineTrainLoss

DFINE_LOSS = DFineLossConfig(cls="vfl", w_cls=1.0, l1=5.0, giou=2.0, fgl=0.15, ddf=1.5, alpha=0.75, gamma=2.0)


def build_dfine_loss(net: nn.Module) -> DFineTrainLoss:
    return DFineTrainLoss(net, cfg=DFINE_LOSS)
