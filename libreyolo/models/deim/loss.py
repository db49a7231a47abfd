"""DEIM training criterion: MAL (1, gamma 1.5) + L1 (5) + GIoU (2) + FGL (0.15) + DDF (1.5) with
union matching (DEIM's ``deim.yml``; implementation and scaling in
:mod:`libreyolo.models._detr.dfine_losses` / :mod:`libreyolo.models._detr.deim_losses`:
``loss = items.sum() * batch_size``)."""

from __future__ import annotations

from torch import nn

from .._detr.dfine_losses import DEIM_LOSS, DFineTrainLoss, build_deim_criterion

__all__ = ["DEIM_LOSS", "build_deim_loss"]


def build_deim_loss(net: nn.Module) -> DFineTrainLoss:
    return build_deim_criterion(net)
