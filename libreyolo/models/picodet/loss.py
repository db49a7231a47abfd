"""PicoDet detection loss: SimOTA assignment, Varifocal loss, GIoU loss and distribution focal
loss (DFL).

Eager by design (SPEC G-2/T-2): the assigner sorts, gathers and selects, so it is never inside a
CUDA graph. It is dense over anchors (no boolean indexing, no ``nonzero``): the host
synchronises only where the padded box count is read (labels on the GPU).

As the reference recipe (PaddleDetection ``PicoHead`` / ``OTAVFLHead`` with
``SimOTAAssigner(candidate_topk=10, iou_weight=6, center_radius=2.5)``, the VFL variant):

* Anchor points are the cell centres. Candidates of an image are the points inside one of its
  boxes or within 2.5 strides (both axes) of a box centre.
* Cost of (box, point) = the Varifocal loss of the point's class *probabilities* against the
  box's one-hot class scaled by their IoU, summed over classes, + 6 * (1 - GIoU), + 1e8 unless
  the point is both inside the box and within its centre region.
* Dynamic k: each box takes its ``k = max(1, int(sum of its top-10 candidate IoUs))`` cheapest
  points; a point taken twice keeps the cheapest box (:func:`libreyolo.ops.assign.dynamic_k_match`).
* Losses: Varifocal (alpha 0.75, gamma 2, IoU-weighted; target = IoU of the point's predicted
  box with its box at the box's class) over all points and classes, divided by the positive
  count (at least 1 per image, summed, as the reference); GIoU (weight 2) and DFL (weight 0.25,
  mean over the 4 sides) on positives weighted by the point's highest class score, divided by
  the sum of those weights (at least 1).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import torch
import torch.nn.functional as F
from torch import Tensor, nn

from ...ops.anchors import bbox2dist, dfl_expectation, dfl_loss, dist2bbox, flatten_levels
from ...ops.assign import dynamic_k_match
from ...ops.boxes import bbox_giou
from ...ops.targets import build_targets
from .postprocess import anchor_grid

OUTSIDE_COST = 1e8  # the reference's INF for a pair outside "in the box and in its centre region"
LOG_CLAMP = -100.0  # binary cross-entropy on probabilities clamps its logs here (as PyTorch / Paddle)


@dataclass(frozen=True, kw_only=True)
class Assignment:
    """SimOTA result for B images and A points (dense; read the fields where ``fg_mask``).

    fg_mask (Tensor[B, A], bool), gt_idx (Tensor[B, A], int64 index into the image's padded
    boxes; 0 for background), labels (Tensor[B, A], int64; 0 for background), bboxes
    (Tensor[B, A, 4], xyxy, units of the boxes), ious (Tensor[B, A]: IoU of the point's predicted
    box with its box; 0 for background).
    """

    fg_mask: Tensor
    gt_idx: Tensor
    labels: Tensor
    bboxes: Tensor
    ious: Tensor


def varifocal_loss(logits: Tensor, target: Tensor, *, alpha: float = 0.75, gamma: float = 2.0) -> Tensor:
    """Varifocal loss, element-wise: ``BCE(x, t) * t`` where the target ``t > 0`` (IoU-weighted
    positives), ``BCE(x, 0) * alpha * sigmoid(x) ** gamma`` elsewhere.

    logits, target (Tensor[..., C]) -> (Tensor[..., C]).

    Example:
        >>> x, t = torch.zeros(1, 2), torch.tensor([[0.5, 0.0]])
        >>> [round(v, 4) for v in varifocal_loss(x, t).flatten().tolist()]  # log 2 * 0.5, log 2 * 0.75 / 4
        [0.3466, 0.13]
    """
    weight = torch.where(target > 0, target, alpha * (logits.sigmoid() - target).abs().pow(gamma))
    return F.binary_cross_entropy_with_logits(logits, target, reduction="none") * weight


class SimOTAAssigner:
    """SimOTA with the Varifocal classification cost (PicoDet), batched over images. See the
    module docstring for the rule."""

    def __init__(self, *, center_radius: float = 2.5, candidate_topk: int = 10, iou_weight: float = 6.0,
                 cls_weight: float = 1.0, alpha: float = 0.75, gamma: float = 2.0) -> None:
        self.center_radius, self.candidate_topk = center_radius, candidate_topk
        self.iou_weight, self.cls_weight, self.alpha, self.gamma = iou_weight, cls_weight, alpha, gamma

    @torch.no_grad()
    def __call__(self, scores: Tensor, pred_bboxes: Tensor, points: Tensor, strides: Tensor,
                 gt_labels: Tensor, gt_bboxes: Tensor, mask_gt: Tensor) -> Assignment:
        """Assign targets.

        scores (Tensor[B, A, C]) class probabilities; pred_bboxes (Tensor[B, A, 4]) xyxy pixels;
        points (Tensor[A, 2]) cell centres in pixels; strides (Tensor[A]); gt_labels
        (Tensor[B, M], int64); gt_bboxes (Tensor[B, M, 4]) xyxy pixels; mask_gt (Tensor[B, M],
        bool) marks real boxes.
        """
        b, a, c = scores.shape
        m = gt_bboxes.shape[1]
        dev = scores.device
        if m == 0:
            return Assignment(fg_mask=torch.zeros((b, a), dtype=torch.bool, device=dev),
                              gt_idx=torch.zeros((b, a), dtype=torch.long, device=dev),
                              labels=torch.zeros((b, a), dtype=torch.long, device=dev),
                              bboxes=torch.zeros((b, a, 4), device=dev), ious=torch.zeros((b, a), device=dev))
        p = scores.float()
        pred = pred_bboxes.float()
        gt = gt_bboxes.float()
        gt_labels = gt_labels.long().clamp(0, c - 1)
        live = mask_gt[..., None]  # (B, M, 1)
        # geometry, (B, M, A): point inside the box; point within radius * stride of its centre
        pts = points[None, None]  # (1, 1, A, 2)
        in_box = (torch.minimum(pts - gt[:, :, None, :2], gt[:, :, None, 2:] - pts).amin(-1) > 0) & live
        centre = (gt[..., :2] + gt[..., 2:]) / 2
        radius = (self.center_radius * strides)[None, None, :, None]
        in_ctr = ((pts - centre[:, :, None]).abs() < radius).all(-1) & live
        cand = (in_box | in_ctr).any(1)  # (B, A)
        valid = cand[:, None, :] & live  # (B, M, A)

        iou, giou = bbox_giou(gt[:, :, None], pred[:, None])  # (B, M, A)
        iou = iou * cand[:, None, :]
        # VFL on probabilities against onehot(class) * IoU, summed over classes: the all-negative
        # sum per point, minus the negative term at the box's class, plus that class's own term
        log_p = p.log().clamp(min=LOG_CLAMP).transpose(1, 2)  # (B, C, A)
        log_1mp = torch.log1p(-p).clamp(min=LOG_CLAMP).transpose(1, 2)
        neg = -log_1mp * self.alpha * p.transpose(1, 2).pow(self.gamma)  # (B, C, A)
        idx = gt_labels[..., None].expand(b, m, a)
        neg_g = neg.gather(1, idx)  # (B, M, A)
        pos_g = -(iou * log_p.gather(1, idx) + (1 - iou) * log_1mp.gather(1, idx)) * iou
        cls_cost = neg.sum(1, keepdim=True) - neg_g + torch.where(iou > 0, pos_g, neg_g)
        cost = (self.cls_weight * cls_cost + self.iou_weight * (1 - giou)
                + OUTSIDE_COST * (~(in_box & in_ctr)).float())
        cost = cost.masked_fill(~valid, float("inf"))

        fg, gt_idx, matched_iou = dynamic_k_match(cost, iou, valid=valid, gt_mask=mask_gt,
                                                  candidate_topk=self.candidate_topk)
        labels = gt_labels.gather(1, gt_idx) * fg
        bboxes = gt.gather(1, gt_idx[..., None].expand(b, a, 4))
        return Assignment(fg_mask=fg, gt_idx=gt_idx, labels=labels, bboxes=bboxes, ious=matched_iou)


class PicoDetLoss(nn.Module):
    """``criterion(preds, batch) -> (loss, loss_items)``.

    preds: list of per-level Tensor[B, nc + 4 * bins, h, w] (class logits, then distance
    logits), any float dtype (computed in float32). batch: dict with ``batch_idx``
    (Tensor[N] int64), ``cls`` (Tensor[N]), ``bboxes`` (Tensor[N, 4] normalised cx, cy, w, h).
    Returns loss (Tensor[], float32) = (vfl + giou + dfl) * B, for backward, and loss_items
    (Tensor[3], detached): vfl, giou, dfl, each already multiplied by its weight
    (``loss_weights``; not ``hyp``, so the trainer's YOLO-style gains leave them alone).

    Example:
        >>> crit = model.build_criterion()  # doctest: +SKIP
        >>> loss, items = crit(model.net(imgs), batch)  # doctest: +SKIP
    """

    def __init__(self, net: Any, *, vfl_weight: float = 1.0, giou_weight: float = 2.0, dfl_weight: float = 0.25,
                 alpha: float = 0.75, gamma: float = 2.0, **assigner: Any) -> None:
        super().__init__()
        self.nc = int(net.nc)
        self.bins = int(net.reg_max)
        self.strides = tuple(int(s) for s in net.strides)
        self.loss_weights: dict[str, float] = {"vfl": vfl_weight, "giou": giou_weight, "dfl": dfl_weight}
        self.alpha, self.gamma = alpha, gamma
        self.assigner = SimOTAAssigner(alpha=alpha, gamma=gamma, **assigner)

    def forward(self, preds: list[Tensor] | tuple[Tensor, ...], batch: dict[str, Any]) -> tuple[Tensor, Tensor]:
        feats = [p.float() for p in preds]
        bsz, dev, r = feats[0].shape[0], feats[0].device, self.bins
        shapes = [tuple(int(v) for v in f.shape[2:]) for f in feats]
        img_hw = (shapes[0][0] * self.strides[0], shapes[0][1] * self.strides[0])
        gt_labels, gt_bboxes, mask_gt = build_targets(batch, batch_size=bsz, img_hw=img_hw, device=dev)

        flat = flatten_levels(feats)  # (B, C + 4R, A)
        cls_logits, reg = flat.split((self.nc, 4 * r), 1)
        logits = cls_logits.transpose(1, 2)  # (B, A, C)
        points, stride_t = anchor_grid(shapes, self.strides, device=dev)  # grid units (A, 2), (A, 1)
        pred_grid = dist2bbox(dfl_expectation(reg, r), points)  # (B, A, 4) grid units
        t = self.assigner(logits.detach().sigmoid(), pred_grid.detach() * stride_t, points * stride_t,
                          stride_t[:, 0], gt_labels, gt_bboxes, mask_gt)
        fg = t.fg_mask

        n_pos = fg.sum(1).clamp(min=1).sum()  # at least one per image, as the reference
        target = torch.zeros_like(logits).scatter_(-1, t.labels[..., None], t.ious[..., None])  # 0 on background
        loss_vfl = varifocal_loss(logits, target, alpha=self.alpha, gamma=self.gamma).sum() / n_pos

        weight = logits.detach().sigmoid().amax(-1) * fg  # (B, A): 0 on background
        avg = weight.sum().clamp(min=1.0)
        target_grid = t.bboxes / stride_t  # (B, A, 4) grid units
        # dense over all points (no host sync); background compares the target with itself, weight 0
        pred_fg = torch.where(fg[..., None], pred_grid, target_grid)
        giou = bbox_giou(pred_fg, target_grid)[1]
        loss_giou = ((1.0 - giou) * weight).sum() / avg
        dist = reg.view(bsz, 4, r, -1).permute(0, 3, 1, 2)  # (B, A, 4, R)
        loss_dfl = (dfl_loss(dist, bbox2dist(points, target_grid, r)) * weight).sum() / avg

        w = self.loss_weights
        items = torch.stack((loss_vfl * w["vfl"], loss_giou * w["giou"], loss_dfl * w["dfl"]))
        return items.sum() * bsz, items.detach()
