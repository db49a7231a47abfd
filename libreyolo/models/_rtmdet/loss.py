"""RTMDet detection loss: dynamic soft label assignment, Quality Focal Loss, GIoU loss.

Eager by design (SPEC G-2/T-2): the assigner sorts, gathers and branches on data, so it is
never inside a CUDA graph; it may synchronise with the host (the padded box count).

As the reference training recipe (``RTMDetHead`` with ``DynamicSoftLabelAssigner(topk=13)``):

* Candidates of an image are the grid points lying strictly inside at least one of its boxes.
* Cost of (point, box) = soft classification cost + 3 * (-log IoU) + soft centre prior
  ``10 ** (d - 3)`` with ``d`` the point-to-box-centre distance in strides. The classification
  cost is the Quality Focal Loss of the point's logits against the box's one-hot class scaled by
  the IoU.
* Each box takes its ``k`` cheapest points, ``k = max(int(sum of its top-13 IoUs), 1)``; a point
  taken by several boxes keeps the cheapest box.
* Losses: QFL (beta 2, soft target = IoU of the point's predicted box with its box) over all
  points and classes, and GIoU (weight 2.0) on positives weighted by the same IoU; both divided
  by the sum of the positives' IoUs (at least 1).

The assignment is batched over images (boxes padded to the largest count) and computes the
classification cost from per-class terms without the (points x boxes x classes) tensor.
Assigner inputs are detached (targets carry no gradient).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import torch
import torch.nn.functional as F
from torch import Tensor, nn

from ...ops.anchors import flatten_levels
from ...ops.boxes import xywh_to_xyxy
from .postprocess import decode_boxes, grid_points

EPS = 1e-7
CENTER_PRIOR_MAX_EXP = 30.0  # 10 ** 30: a finite cost that still ranks below every real candidate


@dataclass(frozen=True, kw_only=True)
class Assignment:
    """Result of :class:`DynamicSoftLabelAssigner` for B images and A points.

    fg_mask (Tensor[B, A], bool), gt_idx (Tensor[B, A], int64 index into the padded boxes of the
    image; 0 for background), labels (Tensor[B, A], int64; 0 for background), bboxes
    (Tensor[B, A, 4], xyxy, same units as the boxes), ious (Tensor[B, A], float32: IoU of the
    point's predicted box with its box; 0 for background).
    """

    fg_mask: Tensor
    gt_idx: Tensor
    labels: Tensor
    bboxes: Tensor
    ious: Tensor


def pairwise_iou(a: Tensor, b: Tensor, *, eps: float = 1e-6) -> Tensor:
    """Batched pairwise IoU. a (Tensor[B, N, 4]) xyxy, b (Tensor[B, M, 4]) xyxy -> (Tensor[B, N, M])."""
    area_a = (a[..., 2] - a[..., 0]) * (a[..., 3] - a[..., 1])  # (B, N)
    area_b = (b[..., 2] - b[..., 0]) * (b[..., 3] - b[..., 1])  # (B, M)
    lt = torch.maximum(a[:, :, None, :2], b[:, None, :, :2])
    rb = torch.minimum(a[:, :, None, 2:], b[:, None, :, 2:])
    inter = (rb - lt).clamp(min=0).prod(-1)  # (B, N, M)
    union = (area_a[:, :, None] + area_b[:, None, :] - inter).clamp(min=eps)
    return inter / union


def giou_loss(pred: Tensor, target: Tensor, *, eps: float = 1e-6) -> Tensor:
    """1 - GIoU of aligned boxes. pred, target (Tensor[P, 4]) xyxy -> (Tensor[P])."""
    area_p = (pred[:, 2] - pred[:, 0]) * (pred[:, 3] - pred[:, 1])
    area_t = (target[:, 2] - target[:, 0]) * (target[:, 3] - target[:, 1])
    inter = (torch.minimum(pred[:, 2:], target[:, 2:]) - torch.maximum(pred[:, :2], target[:, :2])).clamp(min=0).prod(-1)
    union = (area_p + area_t - inter).clamp(min=eps)
    enclose = (torch.maximum(pred[:, 2:], target[:, 2:]) - torch.minimum(pred[:, :2], target[:, :2])).clamp(min=0)
    enclose_area = enclose.prod(-1).clamp(min=eps)
    giou = inter / union - (enclose_area - union) / enclose_area
    return 1.0 - giou


def quality_focal_loss(logits: Tensor, target: Tensor, *, beta: float = 2.0) -> Tensor:
    """Quality Focal Loss, element-wise: ``BCE(x, t) * |t - sigmoid(x)| ** beta``.

    logits, target (Tensor[..., C]); the target is the soft score (IoU) at the positive class
    and 0 elsewhere -> (Tensor[..., C]).
    """
    scale = (target - logits.sigmoid()).abs().pow(beta)
    return F.binary_cross_entropy_with_logits(logits, target, reduction="none") * scale


class DynamicSoftLabelAssigner:
    """Dynamic soft label assignment (RTMDet), batched over images. See the module docstring."""

    def __init__(self, *, topk: int = 13, iou_weight: float = 3.0, soft_center_radius: float = 3.0) -> None:
        self.topk, self.iou_weight, self.soft_center_radius = topk, iou_weight, soft_center_radius

    @torch.no_grad()
    def __call__(self, cls_logits: Tensor, pred_bboxes: Tensor, points: Tensor, strides: Tensor,
                 gt_labels: Tensor, gt_bboxes: Tensor, mask_gt: Tensor, gt_centers: Tensor | None = None) -> Assignment:
        """Assign targets.

        cls_logits (Tensor[B, A, C]) raw logits; pred_bboxes (Tensor[B, A, 4]) xyxy pixels;
        points (Tensor[A, 2]) pixels; strides (Tensor[A]); gt_labels (Tensor[B, M], int64);
        gt_bboxes (Tensor[B, M, 4]) xyxy pixels; mask_gt (Tensor[B, M], bool) marks real boxes;
        gt_centers (Tensor[B, M, 2] pixels, optional): the soft centre prior's centre of each box
        (instance segmentation passes the mask's centre of mass); default the box centre.
        """
        b, a, c = cls_logits.shape
        m = gt_bboxes.shape[1]
        dev = cls_logits.device
        if m == 0:
            return Assignment(fg_mask=torch.zeros((b, a), dtype=torch.bool, device=dev),
                              gt_idx=torch.zeros((b, a), dtype=torch.long, device=dev),
                              labels=torch.zeros((b, a), dtype=torch.long, device=dev),
                              bboxes=torch.zeros((b, a, 4), device=dev),
                              ious=torch.zeros((b, a), device=dev))
        logits = cls_logits.float()
        pred = pred_bboxes.float()
        gt_labels = gt_labels.long().clamp(0, c - 1)
        # candidates: points strictly inside a real box of their image
        x, y = points[:, 0], points[:, 1]
        deltas = torch.stack((x[None, :, None] - gt_bboxes[:, None, :, 0], y[None, :, None] - gt_bboxes[:, None, :, 1],
                              gt_bboxes[:, None, :, 2] - x[None, :, None], gt_bboxes[:, None, :, 3] - y[None, :, None]),
                             -1)  # (B, A, M, 4)
        inside = (deltas.amin(-1) > 0) & mask_gt[:, None, :]  # (B, A, M)
        valid = inside.any(-1)  # (B, A)

        # soft centre prior
        centre = (gt_bboxes[..., :2] + gt_bboxes[..., 2:]) / 2 if gt_centers is None else gt_centers  # (B, M, 2)
        dist = (points[None, :, None, :] - centre[:, None, :, :]).pow(2).sum(-1).sqrt() / strides[None, :, None]
        center_prior = torch.pow(10.0, (dist - self.soft_center_radius).clamp(max=CENTER_PRIOR_MAX_EXP))

        ious = pairwise_iou(pred, gt_bboxes)  # (B, A, M)
        iou_cost = -torch.log(ious + EPS) * self.iou_weight

        # soft classification cost = sum over classes of QFL(logit, onehot(gt) * iou):
        # (sum of the all-negative terms) - (negative term at the box class) + (positive term)
        prob = logits.sigmoid()
        neg = F.softplus(logits) * prob.pow(2)  # BCE(x, 0) * sigmoid(x)^2, (B, A, C)
        idx = gt_labels[:, None, :].expand(b, a, m)
        logit_g = logits.gather(2, idx)  # (B, A, M)
        pos = F.binary_cross_entropy_with_logits(logit_g, ious, reduction="none") * (ious - logit_g.sigmoid()).pow(2)
        cls_cost = neg.sum(-1, keepdim=True) - neg.gather(2, idx) + pos

        cost = cls_cost + iou_cost + center_prior
        usable = valid[:, :, None] & mask_gt[:, None, :]  # (B, A, M)
        cost = cost.masked_fill(~usable, float("inf"))

        # dynamic k per box: int(sum of its top-k IoUs over the image's candidates), at least 1
        k_cand = min(self.topk, a)
        top_ious = ious.masked_fill(~valid[:, :, None], 0.0).topk(k_cand, dim=1).values  # (B, k, M)
        dyn_k = top_ious.sum(1).int().clamp(min=1) * mask_gt  # (B, M); 0 for padding
        sel = cost.topk(k_cand, dim=1, largest=False).indices  # (B, k, M) cheapest points first
        take = torch.arange(k_cand, device=dev)[None, :, None] < dyn_k[:, None, :]  # (B, k, M)
        matching = torch.zeros((b, a, m), dtype=torch.bool, device=dev)
        matching.scatter_(1, sel, take)  # scatter of False onto False is harmless
        matching &= usable

        # a point taken by several boxes keeps its cheapest box (over all boxes of the image)
        multi = matching.sum(-1) > 1  # (B, A)
        cheapest = F.one_hot(cost.argmin(-1), m).bool()  # (B, A, M)
        matching = torch.where(multi[..., None], cheapest, matching)

        fg = matching.any(-1)  # (B, A)
        gt_idx = matching.to(torch.uint8).argmax(-1)  # (B, A)
        matched_iou = ious.gather(2, gt_idx[..., None]).squeeze(-1) * fg
        labels = gt_labels.gather(1, gt_idx) * fg
        bboxes = gt_bboxes.gather(1, gt_idx[..., None].expand(b, a, 4))
        return Assignment(fg_mask=fg, gt_idx=gt_idx, labels=labels, bboxes=bboxes, ious=matched_iou)


def build_targets(batch: dict[str, Tensor], *, batch_size: int, img_hw: tuple[int, int],
                  device: torch.device) -> tuple[Tensor, Tensor, Tensor]:
    """Pad the flat batch labels per image.

    batch: ``batch_idx`` (Tensor[N], int64), ``cls`` (Tensor[N]), ``bboxes`` (Tensor[N, 4]
    normalised cx, cy, w, h). Returns labels (Tensor[B, M], int64), boxes (Tensor[B, M, 4]
    xyxy pixels), mask (Tensor[B, M], bool) with M the largest box count of an image.
    """
    idx = batch["batch_idx"].to(device).long().view(-1)
    cls = batch["cls"].to(device).long().view(-1)
    boxes = batch["bboxes"].to(device).float().view(-1, 4)
    n = idx.numel()
    counts = torch.bincount(idx, minlength=batch_size)
    m = int(counts.max()) if n else 0
    labels = torch.zeros((batch_size, m), dtype=torch.long, device=device)
    out = torch.zeros((batch_size, m, 4), dtype=torch.float32, device=device)
    mask = torch.zeros((batch_size, m), dtype=torch.bool, device=device)
    if n:
        order = torch.argsort(idx, stable=True)
        idx, cls, boxes = idx[order], cls[order], boxes[order]
        slot = torch.arange(n, device=device) - (torch.cumsum(counts, 0) - counts)[idx]
        h, w = img_hw
        labels[idx, slot] = cls
        out[idx, slot] = xywh_to_xyxy(boxes * torch.tensor([w, h, w, h], dtype=torch.float32, device=device))
        mask[idx, slot] = True
    return labels, out, mask


def pad_rows(values: Tensor, batch_idx: Tensor, *, batch_size: int) -> Tensor:
    """Lay per-box rows out per image as :func:`build_targets` pads the boxes.

    values (Tensor[N, ...]) one row per box, batch_idx (Tensor[N]) its image -> Tensor[B, M, ...]
    (zeros where an image has fewer than M boxes), M the largest box count of an image; slot j of
    image b holds that image's j-th row in input order.

    Example:
        >>> pad_rows(torch.tensor([10, 11, 12]), torch.tensor([1, 0, 1]), batch_size=2).tolist()
        [[11, 0], [10, 12]]
    """
    idx = batch_idx.to(values.device).long().view(-1)
    n = idx.numel()
    counts = torch.bincount(idx, minlength=batch_size)
    m = int(counts.max()) if n else 0
    out = values.new_zeros((batch_size, m, *values.shape[1:]))
    if n:
        order = torch.argsort(idx, stable=True)
        idx = idx[order]
        slot = torch.arange(n, device=values.device) - (torch.cumsum(counts, 0) - counts)[idx]
        out[idx, slot] = values[order]
    return out


class RTMDetLoss(nn.Module):
    """``criterion(preds, batch) -> (loss, loss_items)``.

    preds: list of per-level Tensor[B, 4 + nc, H/s, W/s] (raw box regression first, then class
    logits), any float dtype (computed in float32). batch: dict with ``batch_idx`` (Tensor[N]
    int64), ``cls`` (Tensor[N] int64), ``bboxes`` (Tensor[N, 4] normalised cx, cy, w, h).
    Returns loss (Tensor[], float32) = (cls + box) * B, for backward, and loss_items
    (Tensor[2], detached): cls, box, each already multiplied by its weight (``loss_weights``).

    Example:
        >>> crit = model.build_criterion()  # doctest: +SKIP
        >>> loss, items = crit(model.net(imgs), batch)  # doctest: +SKIP
    """

    def __init__(self, net: Any, *, cls_weight: float = 1.0, box_weight: float = 2.0, topk: int = 13,
                 qfl_beta: float = 2.0) -> None:
        super().__init__()
        self.nc = int(net.nc)
        self.strides = tuple(int(s) for s in net.strides)
        self.exp_on_reg = bool(getattr(net, "exp_on_reg", False))
        # deliberately not named ``hyp``: the trainer's box/cls gains are another family's
        self.loss_weights: dict[str, float] = {"cls": cls_weight, "box": box_weight}
        self.qfl_beta = qfl_beta
        self.assigner = DynamicSoftLabelAssigner(topk=topk)

    def forward(self, preds: list[Tensor] | tuple[Tensor, ...], batch: dict[str, Any]) -> tuple[Tensor, Tensor]:
        loss_cls, loss_box, _ = self.terms(preds, batch)
        items = torch.stack((loss_cls * self.loss_weights["cls"], loss_box * self.loss_weights["box"]))
        return items.sum() * preds[0].shape[0], items.detach()

    def terms(self, preds: list[Tensor] | tuple[Tensor, ...], batch: dict[str, Any], *,
              gt_centers: Tensor | None = None) -> tuple[Tensor, Tensor, dict[str, Any]]:
        """The unweighted detection terms and what a subclass needs to add its own.

        preds: per-level Tensor[B, 4 + nc, H/s, W/s] (extra channels past ``4 + nc`` are ignored).
        gt_centers: optional Tensor[B, M, 2] pixels laid out as :func:`build_targets` pads the
        boxes (see :func:`pad_rows`), the assigner's soft-centre points.
        Returns loss_cls (Tensor[]), loss_box (Tensor[]), both divided by the positives' IoU sum,
        and a context dict: ``assignment`` (:class:`Assignment`), ``points`` (Tensor[A, 2]),
        ``strides`` (Tensor[A]), ``img_hw`` (network-input height, width).
        """
        feats = [p[:, :4 + self.nc].float() for p in preds]
        bsz, dev = feats[0].shape[0], feats[0].device
        flat = flatten_levels(feats).transpose(1, 2)  # (B, A, 4 + C)
        reg, cls_logits = flat.split((4, self.nc), -1)
        points, strides = grid_points([tuple(f.shape[2:]) for f in feats], self.strides, device=dev)
        pred_bboxes = decode_boxes(reg, points, strides, exp_on_reg=self.exp_on_reg)  # (B, A, 4) pixels
        img_hw = (feats[0].shape[2] * self.strides[0], feats[0].shape[3] * self.strides[0])

        gt_labels, gt_bboxes, mask_gt = build_targets(batch, batch_size=bsz, img_hw=img_hw, device=dev)
        t = self.assigner(cls_logits.detach(), pred_bboxes.detach(), points, strides, gt_labels, gt_bboxes, mask_gt,
                          gt_centers)
        avg = t.ious.sum().clamp(min=1.0)

        target = torch.zeros_like(cls_logits)
        target.scatter_(-1, t.labels[..., None], t.ious[..., None])  # ious are 0 on background
        loss_cls = quality_focal_loss(cls_logits, target, beta=self.qfl_beta).sum() / avg
        # dense over all points instead of boolean indexing (no host sync); background points
        # compare the target with itself and carry weight 0, so they add nothing, not even NaN
        pred_fg = torch.where(t.fg_mask[..., None], pred_bboxes, t.bboxes)
        giou = giou_loss(pred_fg.reshape(-1, 4), t.bboxes.reshape(-1, 4)).view(bsz, -1)  # (B, A)
        loss_box = (giou * t.ious).sum() / avg
        return loss_cls, loss_box, {"assignment": t, "points": points, "strides": strides, "img_hw": img_hw}
