"""DEIM training criterion: MAL (1, gamma 1.5) + L1 (5) + GIoU (2) + FGL (0.15) + DDF (1.5) with
union matching (DEIM's ``deim.yml``; implementation and scaling in
:mod:`libreyolo.models._detr.dfine_losses` / :mod:`libreyolo.models._detr.deim_losses`:
``loss = items.sum() * batch_size``)."""

from __future__ import annotations

from torch import nn

from .._detr.dfine_losses import DFineLossConfig, DFineTrainLoss

DEIM_LOSS = DFineLossConfig(cls="mal", w_cls=1.0, l1=5.0, giou=2.0, fgl=0.15, ddf=1.5, alpha=0.75, gamma=1.5,
                            mal_alpha=None)


def build_deim_loss(net: nn.Module) -> DFineTrainLoss:
    return DFineTrainLoss(net, cfg=DEIM_LOSS)
