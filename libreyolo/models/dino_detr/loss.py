"""DINO training criterion (Zhang et al. 2022; the reference's R50 4-scale recipe).

The RT-DETR lineage's criterion (:class:`~libreyolo.models._detr.losses.DETRCriterion`, which
scores every decoder layer, the selected encoder proposals and every layer's denoising queries,
Hungarian matching for the first two, fixed matching for denoising, each normalised by the box
count, times the group count for denoising) with DINO's class term: sigmoid focal loss (alpha
0.25, gamma 2, weight 1) on the one-hot class target instead of RT-DETR's varifocal loss; L1 weight
5, GIoU weight 2; matcher costs class 2, L1 5, GIoU 2. The encoder proposals are scored against
the real classes (DINO's ``interm`` loss). Scaling contract of the other DETRs:
``loss = items.sum() * B``, ``items`` = (focal, l1, giou) detached.
"""

from __future__ import annotations

import torch
from torch import Tensor, nn
from torchvision.ops import sigmoid_focal_loss

from ...ops.boxes import bbox_giou, xywh_to_xyxy
from .._detr.losses import DETRCriterion, DETRLossConfig, DETRTrainLoss, Pairs

# ``vfl`` is the class term's weight (focal here); alpha / gamma are the focal loss's.
DINO_LOSS = DETRLossConfig(vfl=1.0, l1=5.0, giou=2.0, alpha=0.25, gamma=2.0, cost_class=2.0, cost_bbox=5.0,
                           cost_giou=2.0)


class DINOCriterion(DETRCriterion):
    """:class:`DETRCriterion` with a focal class term (module docs)."""

    def group_loss(self, logits: Tensor, pred_boxes: Tensor, labels: list[Tensor], boxes: list[Tensor],
                   pairs: Pairs, *, num_boxes: float) -> Tensor:
        c = self.cfg
        logits, pred_boxes = logits.float(), pred_boxes.float()
        device = logits.device
        b_idx = torch.cat([torch.full_like(p, i) for i, (p, _) in enumerate(pairs)])
        src = torch.cat([p for p, _ in pairs])
        tgt_lab = torch.cat([labels[i].to(device)[g] for i, (_, g) in enumerate(pairs)])
        tgt_box = torch.cat([boxes[i].to(device=device, dtype=torch.float32)[g] for i, (_, g) in enumerate(pairs)])
        onehot = torch.zeros_like(logits)
        onehot[b_idx, src, tgt_lab] = 1.0
        focal = sigmoid_focal_loss(logits, onehot, alpha=c.alpha, gamma=c.gamma, reduction="sum") / num_boxes
        if src.numel():
            matched = pred_boxes[b_idx, src]
            _, giou = bbox_giou(xywh_to_xyxy(matched), xywh_to_xyxy(tgt_box))
            l1 = (matched - tgt_box).abs().sum() / num_boxes
            lgiou = (1.0 - giou).sum() / num_boxes
        else:
            l1 = lgiou = pred_boxes.sum() * 0.0
        return torch.stack([c.vfl * focal, c.l1 * l1, c.giou * lgiou])


class DINOTrainLoss(DETRTrainLoss):
    """``criterion(maps, batch) -> (loss, items)``: denoising queries from the batch, the decoder
    (train mode, eager), then :class:`DINOCriterion`."""

    def __init__(self, net: nn.Module) -> None:
        super().__init__(net, cfg=DINO_LOSS)
        self.criterion = DINOCriterion(nc=int(net.nc), cfg=DINO_LOSS)


def build_dino_detr_loss(net: nn.Module) -> DINOTrainLoss:
    return DINOTrainLoss(net)
