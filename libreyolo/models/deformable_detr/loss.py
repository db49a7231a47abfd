"""Deformable DETR training criterion (the paper's recipe, Zhu et al. 2021, section 4 / appendix).

Every decoder layer's output is matched to the ground truth by the shared Hungarian matcher
(:class:`~libreyolo.models._detr.hungarian.HungarianMatcher`: focal class cost 2, L1 5, GIoU 2)
and scored with sigmoid focal loss (alpha 0.25, gamma 2, weight 2) on the one-hot class target,
L1 (weight 5) on normalised cxcywh boxes and ``1 - GIoU`` (weight 2); each term is divided by
the batch's box count (at least 1) and the layers' terms are summed (auxiliary losses). Two stage:
the encoder's proposals are one more term, matched and scored as if every box were class 0 (the
reference's class-agnostic proposal loss; class 0's logit is what ranks the proposals).

Scaling contract of the other DETRs: ``items`` (Tensor[3], detached: weighted focal, l1, giou
summed over layers) and ``loss = items.sum() * B``. Eager by design (matching runs on the host).
"""

from __future__ import annotations

from collections.abc import Sequence

import torch
from torch import Tensor, nn
from torchvision.ops import sigmoid_focal_loss

from ...errors import ConfigError
from ...ops.boxes import bbox_giou, xywh_to_xyxy
from .._detr.hungarian import HungarianMatcher
from .._detr.losses import split_targets

WEIGHTS = {"focal": 2.0, "l1": 5.0, "giou": 2.0}
FOCAL_ALPHA, FOCAL_GAMMA = 0.25, 2.0


class DeformableDETRLoss:
    """``criterion(preds, batch) -> (loss, items)``; ``preds`` is the train-mode network output
    (the encoder maps); the decoder runs here, eagerly, in train mode."""

    def __init__(self, net: nn.Module) -> None:
        self.net = net
        self.matcher = HungarianMatcher(cost_class=2.0, cost_bbox=5.0, cost_giou=2.0, alpha=FOCAL_ALPHA,
                                        gamma=FOCAL_GAMMA)
        self.hyp: dict[str, float] = {}

    def layer_loss(self, logits: Tensor, boxes: Tensor, labels: list[Tensor], gt: list[Tensor],
                   num_boxes: float) -> Tensor:
        """Weighted (focal, l1, giou) of one decoder layer: logits (Tensor[B, Q, nc]), boxes
        (Tensor[B, Q, 4] cxcywh) -> Tensor[3]."""
        logits, boxes = logits.float(), boxes.float()
        pairs = self.matcher(logits, boxes, labels, gt)
        b_idx = torch.cat([torch.full_like(p, i) for i, (p, _) in enumerate(pairs)])
        src = torch.cat([p for p, _ in pairs])
        tgt_lab = torch.cat([labels[i][g] for i, (_, g) in enumerate(pairs)])
        tgt_box = torch.cat([gt[i][g] for i, (_, g) in enumerate(pairs)])
        onehot = torch.zeros_like(logits)
        onehot[b_idx, src, tgt_lab] = 1.0
        focal = sigmoid_focal_loss(logits, onehot, alpha=FOCAL_ALPHA, gamma=FOCAL_GAMMA, reduction="sum") / num_boxes
        if src.numel():
            matched = boxes[b_idx, src]
            _, giou = bbox_giou(xywh_to_xyxy(matched), xywh_to_xyxy(tgt_box))
            l1 = (matched - tgt_box).abs().sum() / num_boxes
            lgiou = (1.0 - giou).sum() / num_boxes
        else:
            l1 = lgiou = boxes.sum() * 0.0
        return torch.stack([WEIGHTS["focal"] * focal, WEIGHTS["l1"] * l1, WEIGHTS["giou"] * lgiou])

    def __call__(self, preds: Sequence[Tensor], batch: dict[str, Tensor]) -> tuple[Tensor, Tensor]:
        feats = list(preds)
        decoder = self.net.decoder
        if not decoder.training:
            raise ConfigError("the Deformable DETR criterion needs the network in train mode (net.train()): in eval "
                              "mode the network returns final detections, not encoder maps")
        bsz = int(feats[0].shape[0])
        labels, gt = split_targets(batch, batch_size=bsz, device=feats[0].device)
        out = decoder(feats)  # (layers, B, Q, nc), (layers, B, Q, 4) [, two-stage proposals]
        logits, boxes = out[0], out[1]
        num_boxes = float(max(sum(int(t.numel()) for t in labels), 1))
        terms = [self.layer_loss(logits[i], boxes[i], labels, gt, num_boxes) for i in range(logits.shape[0])]
        if len(out) == 4:  # two stage: the proposals learn class-agnostic objectness (every box is class 0)
            terms.append(self.layer_loss(out[2], out[3], [torch.zeros_like(t) for t in labels], gt, num_boxes))
        items = torch.stack(terms).sum(0)
        return items.sum() * bsz, items.detach()


def build_deformable_detr_loss(net: nn.Module) -> DeformableDETRLoss:
    return DeformableDETRLoss(net)
