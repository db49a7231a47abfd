"""DEIMv2 training criterion: DEIM's (MAL + L1 + GIoU + FGL + DDF, union matching;
:data:`libreyolo.models._detr.dfine_losses.DEIM_LOSS`). The reference's atto / femto configs turn
the two localisation terms off (``losses: ['mal', 'boxes']``, ``use_uni_set: False``); here they
stay on (a deviation, listed in the README)."""

from __future__ import annotations

from torch import nn

from .._detr.dfine_losses import DFineTrainLoss, build_deim_criterion


def build_deimv2_loss(net: nn.Module) -> DFineTrainLoss:
    return build_deim_criterion(net)
