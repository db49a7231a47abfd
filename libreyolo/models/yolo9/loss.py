"""YOLOv9 detection loss: task-aligned assignment, BCE class loss, CIoU + DFL box losses.

Eager by design (SPEC G-2/T-2): the assigner sorts, gathers and branches on data, so it is
never inside a CUDA graph; it may synchronise with the host.

Hyper-parameters follow the YOLOv9 reference training recipe (``hyp.scratch-high.yaml`` and its
``ComputeLoss``): assigner ``topk=10, alpha=0.5, beta=6.0``; loss gains ``box=7.5, cls=0.5,
dfl=1.5``; the assigner's overlap is CIoU clamped at 0; targets are soft (IoU-aware) class scores.

Deviation from the reference, on purpose: when an anchor is a candidate of several ground
truths, it goes to the candidate with the highest overlap *among its candidates* (the reference
takes the arg-max over every ground truth of the image, padding included).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import torch
import torch.nn.functional as F
from torch import Tensor, nn

from ...ops.anchors import bbox2dist, dfl_expectation, dist2bbox, flatten_levels, make_anchors
from ...ops.boxes import bbox_ciou, xywh_to_xyxy


@dataclass(frozen=True, kw_only=True)
class Assignment:
    """Result of :class:`TaskAlignedAssigner` for B images and A anchors.

    labels (Tensor[B, A], int64), bboxes (Tensor[B, A, 4], xyxy, same units as the GT boxes),
    scores (Tensor[B, A, C], float soft targets; zero rows for background), fg_mask
    (Tensor[B, A], bool), gt_idx (Tensor[B, A], int64 index into the padded GT of the image).
    """

    labels: Tensor
    bboxes: Tensor
    scores: Tensor
    fg_mask: Tensor
    gt_idx: Tensor


class TaskAlignedAssigner:
    """Task-aligned label assignment (TOOD): align = score**alpha * IoU**beta.

    For each ground truth the ``topk`` anchors of highest alignment whose centre lies strictly
    inside the box are candidates; an anchor claimed by several ground truths keeps the one it
    overlaps most. The one-hot class target is scaled per ground truth so that its best anchor
    gets that anchor's IoU (``align / max_align * max_iou``).
    """

    def __init__(self, *, nc: int, topk: int = 10, alpha: float = 0.5, beta: float = 6.0, eps: float = 1e-9) -> None:
        self.nc, self.topk, self.alpha, self.beta, self.eps = nc, topk, alpha, beta, eps

    @torch.no_grad()
    def __call__(self, pd_scores: Tensor, pd_bboxes: Tensor, anchor_points: Tensor, gt_labels: Tensor,
                 gt_bboxes: Tensor, mask_gt: Tensor) -> Assignment:
        """Assign targets.

        pd_scores (Tensor[B, A, C]) probabilities; pd_bboxes (Tensor[B, A, 4]) xyxy pixels;
        anchor_points (Tensor[A, 2]) pixels; gt_labels (Tensor[B, M], int64); gt_bboxes
        (Tensor[B, M, 4]) xyxy pixels; mask_gt (Tensor[B, M], bool) marks real (unpadded) boxes.
        """
        b, a, c = pd_scores.shape
        m = gt_bboxes.shape[1]
        dev = pd_scores.device
        if m == 0:
            return Assignment(labels=torch.full((b, a), self.nc, dtype=torch.long, device=dev),
                              bboxes=torch.zeros_like(pd_bboxes), scores=torch.zeros_like(pd_scores),
                              fg_mask=torch.zeros((b, a), dtype=torch.bool, device=dev),
                              gt_idx=torch.zeros((b, a), dtype=torch.long, device=dev))
        gt_labels = gt_labels.long().clamp(0, c - 1)
        # score of each anchor for each GT's class: (B, M, A)
        scores = pd_scores.transpose(1, 2).gather(1, gt_labels[..., None].expand(b, m, a))
        overlaps = bbox_ciou(gt_bboxes[:, :, None, :], pd_bboxes[:, None, :, :]).clamp_(min=0)  # (B, M, A)
        align = scores.pow(self.alpha) * overlaps.pow(self.beta)  # (B, M, A)

        # candidate test: anchor centre strictly inside the GT box
        x, y = anchor_points[:, 0], anchor_points[:, 1]
        gx1, gy1, gx2, gy2 = (gt_bboxes[..., i, None] for i in range(4))  # each (B, M, 1)
        inside = torch.stack((x - gx1, y - gy1, gx2 - x, gy2 - y), -1).amin(-1) > self.eps  # (B, M, A)
        valid = inside & mask_gt[..., None]

        k = min(self.topk, a)
        topk_idx = (align * valid).topk(k, dim=-1).indices  # (B, M, k)
        in_topk = torch.zeros_like(valid).scatter_(-1, topk_idx, True)
        mask_pos = in_topk & valid  # (B, M, A)

        # one GT per anchor: the candidate GT with the highest overlap
        multi = mask_pos.sum(1) > 1  # (B, A)
        if bool(multi.any()):
            best = overlaps.masked_fill(~mask_pos, -1.0).argmax(1)  # (B, A)
            best_onehot = F.one_hot(best, m).transpose(1, 2).bool()  # (B, M, A)
            mask_pos = torch.where(multi[:, None, :], best_onehot & mask_pos, mask_pos)
        fg_mask = mask_pos.any(1)  # (B, A)
        gt_idx = mask_pos.to(torch.uint8).argmax(1)  # (B, A)

        labels = gt_labels.gather(1, gt_idx)  # (B, A)
        bboxes = gt_bboxes.gather(1, gt_idx[..., None].expand(b, a, 4))  # (B, A, 4)
        target = F.one_hot(labels, c).to(pd_scores.dtype) * fg_mask[..., None]  # (B, A, C)

        # IoU-aware soft targets, normalised per GT
        align = align * mask_pos
        max_align = align.amax(-1, keepdim=True)  # (B, M, 1)
        max_iou = (overlaps * mask_pos).amax(-1, keepdim=True)  # (B, M, 1)
        norm = (align * max_iou / (max_align + self.eps)).amax(1)  # (B, A)
        return Assignment(labels=labels, bboxes=bboxes, scores=target * norm[..., None], fg_mask=fg_mask,
                          gt_idx=gt_idx)


def dfl_loss(pred_dist: Tensor, target: Tensor) -> Tensor:
    """Distribution focal loss.

    pred_dist (Tensor[P, 4, R]) logits over the R bins; target (Tensor[P, 4]) distances in
    [0, R - 1) -> (Tensor[P]) mean over the 4 sides of the cross-entropy to the two nearest bins,
    weighted by linear interpolation.
    """
    p, _, r = pred_dist.shape
    left = target.long()
    w_right = target - left.to(target.dtype)
    logits = pred_dist.reshape(-1, r)
    ce_l = F.cross_entropy(logits, left.reshape(-1), reduction="none").view(p, 4)
    ce_r = F.cross_entropy(logits, (left + 1).reshape(-1), reduction="none").view(p, 4)
    return (ce_l * (1 - w_right) + ce_r * w_right).mean(-1)


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
    counts = torch.bincount(idx, minlength=batch_size) if n else torch.zeros(batch_size, dtype=torch.long, device=device)
    m = int(counts.max()) if n else 0
    labels = torch.zeros((batch_size, m), dtype=torch.long, device=device)
    out = torch.zeros((batch_size, m, 4), dtype=torch.float32, device=device)
    mask = torch.zeros((batch_size, m), dtype=torch.bool, device=device)
    if n:
        order = torch.argsort(idx, stable=True)
        idx, cls, boxes = idx[order], cls[order], boxes[order]
        starts = torch.cumsum(counts, 0) - counts
        slot = torch.arange(n, device=device) - starts[idx]
        h, w = img_hw
        scale = torch.tensor([w, h, w, h], dtype=torch.float32, device=device)
        labels[idx, slot] = cls
        out[idx, slot] = xywh_to_xyxy(boxes * scale)
        mask[idx, slot] = True
    return labels, out, mask


class YOLO9Loss(nn.Module):
    """``criterion(preds, batch) -> (loss, loss_items)``.

    preds: list of per-level Tensor[B, 4 * reg_max + nc, H/s, W/s] (box-distribution logits first,
    then class logits), any float dtype (computed in float32). batch: dict as built by
    ``libreyolo.data.dataset.collate_detection`` (``batch_idx``, ``cls``, ``bboxes``).
    Returns loss (Tensor[], float32) = (box + cls + dfl) * B, for backward, and loss_items
    (Tensor[3], detached): box, cls, dfl, each already multiplied by its gain.

    Example:
        >>> crit = model.build_criterion()  # doctest: +SKIP
        >>> loss, items = crit(model.net(imgs), batch)  # doctest: +SKIP
    """

    def __init__(self, net: Any, *, box: float = 7.5, cls: float = 0.5, dfl: float = 1.5, topk: int = 10,
                 alpha: float = 0.5, beta: float = 6.0) -> None:
        super().__init__()
        self.nc = int(net.nc)
        self.reg_max = int(net.reg_max)
        self.strides = [int(s) for s in net.strides]
        self.hyp: dict[str, float] = {"box": box, "cls": cls, "dfl": dfl}
        self.assigner = TaskAlignedAssigner(nc=self.nc, topk=topk, alpha=alpha, beta=beta)

    def forward(self, preds: list[Tensor] | tuple[Tensor, ...], batch: dict[str, Any]) -> tuple[Tensor, Tensor]:
        feats = [p.float() for p in preds]
        bsz = feats[0].shape[0]
        dev = feats[0].device
        r = self.reg_max
        x = flatten_levels(feats)  # (B, 4R + C, A)
        reg, cls_logits = x.split((4 * r, self.nc), 1)
        pred_scores = cls_logits.transpose(1, 2)  # (B, A, C)
        anchor_points, stride_t = make_anchors([tuple(f.shape[2:]) for f in feats], self.strides, device=dev)
        pred_bboxes = dist2bbox(dfl_expectation(reg, r), anchor_points)  # (B, A, 4) grid units
        img_hw = (feats[0].shape[2] * self.strides[0], feats[0].shape[3] * self.strides[0])

        gt_labels, gt_bboxes, mask_gt = build_targets(batch, batch_size=bsz, img_hw=img_hw, device=dev)
        t = self.assigner(pred_scores.detach().sigmoid(), pred_bboxes.detach() * stride_t,
                          anchor_points * stride_t, gt_labels, gt_bboxes, mask_gt)
        target_bboxes = t.bboxes / stride_t  # grid units
        tss = t.scores.sum().clamp(min=1.0)

        loss_cls = F.binary_cross_entropy_with_logits(pred_scores, t.scores, reduction="none").sum() / tss
        fg = t.fg_mask
        if bool(fg.any()):
            weight = t.scores.sum(-1)[fg]  # (P,)
            iou = bbox_ciou(pred_bboxes[fg], target_bboxes[fg])
            loss_box = ((1.0 - iou) * weight).sum() / tss
            dist = reg.transpose(1, 2).reshape(bsz, -1, 4, r)[fg]  # (P, 4, R)
            ltrb = bbox2dist(anchor_points, target_bboxes, r)[fg]  # (P, 4)
            loss_dfl = (dfl_loss(dist, ltrb) * weight).sum() / tss
        else:
            loss_box = loss_dfl = pred_bboxes.sum() * 0.0
        items = torch.stack((loss_box * self.hyp["box"], loss_cls * self.hyp["cls"], loss_dfl * self.hyp["dfl"]))
        return items.sum() * bsz, items.detach()
