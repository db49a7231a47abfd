"""RT-DETRv2 training criterion, the RT-DETR recipe (``RTDETRCriterionv2`` with its defaults):
Hungarian matching, VFL (1) + L1 (5) + GIoU (2), auxiliary losses for every decoder layer, the
encoder's selected tokens and the denoising groups (shared implementation in
:mod:`libreyolo.models._detr.losses`; scaling documented there: ``loss = items.sum() * batch_size``)."""

from __future__ import annotations

from torch import nn

from .._detr.losses import DETRLossConfig, DETRTrainLoss

RTDETRV2_LOSS = DETRLossConfig(vfl=1.0, l1=5.0, giou=2.0, alpha=0.75, gamma=2.0,
                               cost_class=2.0, cost_bbox=5.0, cost_giou=2.0)


def build_rtdetrv2_loss(net: nn.Module) -> DETRTrainLoss:
    return DETRTrainLoss(net, cfg=RTDETRV2_LOSS)
