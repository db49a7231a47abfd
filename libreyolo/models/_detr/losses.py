"""Set-prediction losses of the RT-DETR lineage: VFL + L1 + GIoU over matched pairs.

Per the RT-DETR reference criterion: every decoder layer's output (auxiliary losses), the
selected encoder tokens and every decoder layer's denoising queries are scored separately and
summed. Matching: Hungarian (:class:`~libreyolo.models._detr.hungarian.HungarianMatcher`) for the
decoder layers and the encoder tokens; fixed (each positive denoising query reconstructs its
own ground truth) for denoising. Each term is normalised by the number of ground-truth boxes in
the batch (at least 1; times the group count for denoising).

* VFL (varifocal): BCE against an IoU-valued target on the matched class,
  weight ``alpha * p^gamma`` on negatives (alpha 0.75, gamma 2), summed over queries and classes.
* L1 on normalised cxcywh boxes; GIoU as ``1 - GIoU``.
* Weights: vfl 1, l1 5, giou 2.

Eager by design (matching is on the host).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field

import torch
import torch.nn.functional as F
from torch import Tensor

from ...device import autocast
from ...ops.boxes import bbox_giou, xywh_to_xyxy
from .decoder import DecoderTrainOutput
from .hungarian import HungarianMatcher

Pairs = list[tuple[Tensor, Tensor]]  # per image (pred_idx, gt_idx)


@dataclass(frozen=True, kw_only=True)
class DETRLossConfig:
    """Loss weights and VFL focusing parameters (reference defaults)."""

    vfl: float = 1.0
    l1: float = 5.0
    giou: float = 2.0
    alpha: float = 0.75
    gamma: float = 2.0
    cost_class: float = 2.0
    cost_bbox: float = 5.0
    cost_giou: float = 2.0
    matcher_alpha: float = 0.25
    matcher_gamma: float = 2.0


@dataclass(kw_only=True)
class DETRCriterion:
    """Sum of the weighted VFL, L1 and GIoU terms over all output groups.

    __call__(out, labels, boxes): out (:class:`DecoderTrainOutput`); per image labels
    (Tensor[n_i] int64) and boxes (Tensor[n_i, 4] normalised cxcywh) -> (total loss, scalar
    Tensor with grad; items, Tensor[3] detached: weighted vfl, l1, giou summed over groups).
    """

    nc: int
    cfg: DETRLossConfig = field(default_factory=DETRLossConfig)

    def __post_init__(self) -> None:
        c = self.cfg
        self.matcher = HungarianMatcher(cost_class=c.cost_class, cost_bbox=c.cost_bbox, cost_giou=c.cost_giou,
                                        alpha=c.matcher_alpha, gamma=c.matcher_gamma)

    def __call__(self, out: DecoderTrainOutput, labels: Sequence[Tensor], boxes: Sequence[Tensor]) -> tuple[Tensor, Tensor]:
        labels, boxes = list(labels), list(boxes)
        num_boxes = float(max(sum(int(t.numel()) for t in labels), 1))
        terms: list[Tensor] = []
        groups = [(out.logits[i], out.boxes[i]) for i in range(out.logits.shape[0])]
        groups.append((out.enc_logits, out.enc_boxes))
        for lg, bx in groups:
            pairs = self.matcher(lg, bx, labels, boxes)
            terms.append(self.group_loss(lg, bx, labels, boxes, pairs, num_boxes=num_boxes))
        if out.dn is not None and out.dn_logits is not None and out.dn_boxes is not None:
            pairs = list(zip(out.dn.positive_idx, out.dn.gt_idx, strict=True))
            for i in range(out.dn_logits.shape[0]):
                terms.append(self.group_loss(out.dn_logits[i], out.dn_boxes[i], labels, boxes, pairs,
                                             num_boxes=num_boxes * out.dn.groups))
        items = torch.stack(terms).sum(0)  # (3,)
        return items.sum(), items.detach()

    def group_loss(self, logits: Tensor, pred_boxes: Tensor, labels: list[Tensor], boxes: list[Tensor],
                   pairs: Pairs, *, num_boxes: float) -> Tensor:
        """Weighted (vfl, l1, giou) of one output group: logits (Tensor[B, Q, nc]), pred_boxes
        (Tensor[B, Q, 4]) -> Tensor[3]."""
        c = self.cfg
        logits, pred_boxes = logits.float(), pred_boxes.float()
        device = logits.device
        b_idx = torch.cat([torch.full_like(p, i) for i, (p, _) in enumerate(pairs)]) if pairs else None
        src = torch.cat([p for p, _ in pairs])
        tgt_lab = torch.cat([labels[i].to(device)[g] for i, (_, g) in enumerate(pairs)])
        tgt_box = torch.cat([boxes[i].to(device=device, dtype=torch.float32)[g] for i, (_, g) in enumerate(pairs)])
        onehot = torch.zeros_like(logits)
        score = torch.zeros_like(logits)
        if src.numel():
            matched = pred_boxes[b_idx, src]  # (M, 4)
            iou, giou = bbox_giou(xywh_to_xyxy(matched), xywh_to_xyxy(tgt_box))
            onehot[b_idx, src, tgt_lab] = 1.0
            score[b_idx, src, tgt_lab] = iou.detach().clamp(min=0).to(score.dtype)
            l1 = (matched - tgt_box).abs().sum() / num_boxes
            lgiou = (1.0 - giou).sum() / num_boxes
        else:
            l1 = lgiou = pred_boxes.sum() * 0.0
        p = logits.sigmoid().detach()
        weight = c.alpha * p.pow(c.gamma) * (1.0 - onehot) + score
        vfl = F.binary_cross_entropy_with_logits(logits, score, weight=weight, reduction="sum") / num_boxes
        return torch.stack([c.vfl * vfl, c.l1 * l1, c.giou * lgiou])


def split_targets(batch: dict[str, Tensor], *, batch_size: int, device: torch.device) -> tuple[list[Tensor], list[Tensor]]:
    """The trainer's flat targets -> per image (labels Tensor[n_i] int64, boxes Tensor[n_i, 4]).

    batch: ``batch_idx`` (Tensor[N] int64), ``cls`` (Tensor[N] int64, or [N, 1]), ``bboxes``
    (Tensor[N, 4] normalised cxcywh); any device.
    """
    idx = batch["batch_idx"].reshape(-1).to(device=device, dtype=torch.int64)
    cls = batch["cls"].reshape(-1).to(device=device, dtype=torch.int64)
    box = batch["bboxes"].reshape(-1, 4).to(device=device, dtype=torch.float32)
    labels, boxes = [], []
    for i in range(batch_size):
        m = idx == i
        labels.append(cls[m])
        boxes.append(box[m])
    return labels, boxes


class DETRTrainLoss:
    """Training criterion for :class:`~libreyolo.models._detr.net.EncoderDecoderDetector`.

    ``criterion(preds, batch) -> (loss, items)`` where ``preds`` is the train-mode network
    output (the encoder maps, see :mod:`.detr_net`). It builds the denoising queries from the
    batch, runs the decoder eagerly (under autocast in the maps' dtype when they are fp16/bf16,
    i.e. when the trainer ran the encoder under AMP), matches and scores.

    Scaling (same contract as the YOLOv9 loss, so the trainer's accumulation and weight-decay
    scaling treat every family alike): ``items`` (Tensor[3], detached: weighted vfl, l1, giou,
    each normalised by the batch's box count and summed over all output groups) and
    ``loss = items.sum() * B``.
    """

    def __init__(self, net: torch.nn.Module, *, cfg: DETRLossConfig | None = None,
                 max_dn_gt: int | None = None) -> None:
        self.net = net
        self.criterion = DETRCriterion(nc=int(net.nc), cfg=cfg or DETRLossConfig())
        self.max_dn_gt = max_dn_gt
        self.hyp: dict[str, float] = {}

    def decoder_outputs(self, preds: Sequence[Tensor], labels: list[Tensor], boxes: list[Tensor]) -> DecoderTrainOutput:
        """Run the decoder (train mode) on the encoder maps with denoising queries."""
        from ...errors import ConfigError

        decoder = self.net.decoder
        if not decoder.training:
            raise ConfigError("the DETR criterion needs the network in train mode (net.train()): in eval mode "
                              "the network returns final detections, not encoder maps")
        feats = list(preds)
        dn = decoder.make_denoising(labels, boxes, num_queries=decoder.num_selected(feats), max_gt_cap=self.max_dn_gt)
        dtype = feats[0].dtype
        if dtype in (torch.float16, torch.bfloat16):
            with autocast(feats[0].device, dtype, cache=True):
                return decoder(feats, dn)
        return decoder(feats, dn)

    def __call__(self, preds: Sequence[Tensor], batch: dict[str, Tensor]) -> tuple[Tensor, Tensor]:
        feats = list(preds)
        bsz = int(feats[0].shape[0])
        labels, boxes = split_targets(batch, batch_size=bsz, device=feats[0].device)
        out = self.decoder_outputs(feats, labels, boxes)
        total, items = self.criterion(out, labels, boxes)
        return total * bsz, items
