"""Frozen reference of the YOLOv9 loss and its random batches (shared by a test and a benchmark).

``_Ref*`` below is the earlier implementation of ``libreyolo.models.yolo9.loss`` (boolean-mask
indexing, host branches), kept verbatim in its arithmetic: ``tests/unit/models/test_yolo9_loss_speed.py``
checks that the current loss still matches it, ``benchmarks/bench_loss.py`` times the two side by
side. Imports nothing beyond torch and libreyolo.
"""

from __future__ import annotations

from types import SimpleNamespace
from typing import Any

import torch
import torch.nn.functional as F
from torch import Tensor, nn

from libreyolo.ops.anchors import (
    bbox2dist,
    dfl_expectation,
    dist2bbox,
    flatten_levels,
    make_anchors,
)
from libreyolo.ops.boxes import bbox_ciou, xywh_to_xyxy

# ---------------------------------------------------------------------------------------------
# frozen reference (the loss as it was before the sync-free rewrite)
# ---------------------------------------------------------------------------------------------


class _RefAssigner:
    def __init__(self, *, nc: int, topk: int = 10, alpha: float = 0.5, beta: float = 6.0, eps: float = 1e-9) -> None:
        self.nc, self.topk, self.alpha, self.beta, self.eps = nc, topk, alpha, beta, eps

    @torch.no_grad()
    def __call__(self, pd_scores: Tensor, pd_bboxes: Tensor, anchor_points: Tensor, gt_labels: Tensor,
                 gt_bboxes: Tensor, mask_gt: Tensor) -> SimpleNamespace:
        b, a, c = pd_scores.shape
        m = gt_bboxes.shape[1]
        dev = pd_scores.device
        if m == 0:
            return SimpleNamespace(labels=torch.full((b, a), self.nc, dtype=torch.long, device=dev),
                                   bboxes=torch.zeros_like(pd_bboxes), scores=torch.zeros_like(pd_scores),
                                   fg_mask=torch.zeros((b, a), dtype=torch.bool, device=dev),
                                   gt_idx=torch.zeros((b, a), dtype=torch.long, device=dev))
        gt_labels = gt_labels.long().clamp(0, c - 1)
        scores = pd_scores.transpose(1, 2).gather(1, gt_labels[..., None].expand(b, m, a))
        overlaps = bbox_ciou(gt_bboxes[:, :, None, :], pd_bboxes[:, None, :, :]).clamp_(min=0)
        align = scores.pow(self.alpha) * overlaps.pow(self.beta)
        x, y = anchor_points[:, 0], anchor_points[:, 1]
        gx1, gy1, gx2, gy2 = (gt_bboxes[..., i, None] for i in range(4))
        inside = torch.stack((x - gx1, y - gy1, gx2 - x, gy2 - y), -1).amin(-1) > self.eps
        valid = inside & mask_gt[..., None]
        k = min(self.topk, a)
        topk_idx = (align * valid).topk(k, dim=-1).indices
        in_topk = torch.zeros_like(valid).scatter_(-1, topk_idx, True)
        mask_pos = in_topk & valid
        multi = mask_pos.sum(1) > 1
        if bool(multi.any()):
            best = overlaps.masked_fill(~mask_pos, -1.0).argmax(1)
            best_onehot = F.one_hot(best, m).transpose(1, 2).bool()
            mask_pos = torch.where(multi[:, None, :], best_onehot & mask_pos, mask_pos)
        fg_mask = mask_pos.any(1)
        gt_idx = mask_pos.to(torch.uint8).argmax(1)
        labels = gt_labels.gather(1, gt_idx)
        bboxes = gt_bboxes.gather(1, gt_idx[..., None].expand(b, a, 4))
        target = F.one_hot(labels, c).to(pd_scores.dtype) * fg_mask[..., None]
        align = align * mask_pos
        max_align = align.amax(-1, keepdim=True)
        max_iou = (overlaps * mask_pos).amax(-1, keepdim=True)
        norm = (align * max_iou / (max_align + self.eps)).amax(1)
        return SimpleNamespace(labels=labels, bboxes=bboxes, scores=target * norm[..., None], fg_mask=fg_mask,
                               gt_idx=gt_idx)


def _ref_dfl_loss(pred_dist: Tensor, target: Tensor) -> Tensor:
    p, _, r = pred_dist.shape
    left = target.long()
    w_right = target - left.to(target.dtype)
    logits = pred_dist.reshape(-1, r)
    ce_l = F.cross_entropy(logits, left.reshape(-1), reduction="none").view(p, 4)
    ce_r = F.cross_entropy(logits, (left + 1).reshape(-1), reduction="none").view(p, 4)
    return (ce_l * (1 - w_right) + ce_r * w_right).mean(-1)


def _ref_build_targets(batch: dict[str, Tensor], *, batch_size: int, img_hw: tuple[int, int],
                       device: torch.device) -> tuple[Tensor, Tensor, Tensor]:
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


class _RefLoss(nn.Module):
    def __init__(self, net: Any, *, box: float = 7.5, cls: float = 0.5, dfl: float = 1.5, topk: int = 10,
                 alpha: float = 0.5, beta: float = 6.0) -> None:
        super().__init__()
        self.nc = int(net.nc)
        self.reg_max = int(net.reg_max)
        self.strides = [int(s) for s in net.strides]
        self.hyp: dict[str, float] = {"box": box, "cls": cls, "dfl": dfl}
        self.assigner = _RefAssigner(nc=self.nc, topk=topk, alpha=alpha, beta=beta)

    def forward(self, preds: list[Tensor], batch: dict[str, Any]) -> tuple[Tensor, Tensor]:
        feats = [p.float() for p in preds]
        bsz = feats[0].shape[0]
        dev = feats[0].device
        r = self.reg_max
        x = flatten_levels(feats)
        reg, cls_logits = x.split((4 * r, self.nc), 1)
        pred_scores = cls_logits.transpose(1, 2)
        anchor_points, stride_t = make_anchors([tuple(f.shape[2:]) for f in feats], self.strides, device=dev)
        pred_bboxes = dist2bbox(dfl_expectation(reg, r), anchor_points)
        img_hw = (feats[0].shape[2] * self.strides[0], feats[0].shape[3] * self.strides[0])
        gt_labels, gt_bboxes, mask_gt = _ref_build_targets(batch, batch_size=bsz, img_hw=img_hw, device=dev)
        t = self.assigner(pred_scores.detach().sigmoid(), pred_bboxes.detach() * stride_t,
                          anchor_points * stride_t, gt_labels, gt_bboxes, mask_gt)
        target_bboxes = t.bboxes / stride_t
        tss = t.scores.sum().clamp(min=1.0)
        loss_cls = F.binary_cross_entropy_with_logits(pred_scores, t.scores, reduction="none").sum() / tss
        fg = t.fg_mask
        if bool(fg.any()):
            weight = t.scores.sum(-1)[fg]
            iou = bbox_ciou(pred_bboxes[fg], target_bboxes[fg])
            loss_box = ((1.0 - iou) * weight).sum() / tss
            dist = reg.transpose(1, 2).reshape(bsz, -1, 4, r)[fg]
            ltrb = bbox2dist(anchor_points, target_bboxes, r)[fg]
            loss_dfl = (_ref_dfl_loss(dist, ltrb) * weight).sum() / tss
        else:
            loss_box = loss_dfl = pred_bboxes.sum() * 0.0
        items = torch.stack((loss_box * self.hyp["box"], loss_cls * self.hyp["cls"], loss_dfl * self.hyp["dfl"]))
        return items.sum() * bsz, items.detach()


def make_reference(net: Any) -> nn.Module:
    """The frozen earlier loss for ``net`` (anything with ``nc``, ``reg_max``, ``strides``)."""
    return _RefLoss(net)


# ---------------------------------------------------------------------------------------------
# random batches (shared by the loss tests and benchmarks/bench_loss.py)
# ---------------------------------------------------------------------------------------------


def make_batch(*, counts: list[int], nc: int, seed: int, clustered: bool = False) -> dict[str, Tensor]:
    """Labels for ``len(counts)`` images with ``counts[i]`` boxes each (CPU, collate layout).

    Boxes are normalised cx, cy, w, h with sizes from 1 % to 60 % of the image (some too small
    to hold an anchor centre); ``clustered`` puts them around a few centres so that anchors are
    claimed by several boxes.
    """
    g = torch.Generator().manual_seed(seed)
    n = sum(counts)
    idx = torch.repeat_interleave(torch.arange(len(counts)), torch.tensor(counts, dtype=torch.long))
    idx = idx[torch.randperm(n, generator=g)]  # images interleaved, as after shuffling
    if clustered:
        centres = torch.rand(3, 2, generator=g) * 0.5 + 0.25
        cxy = centres[torch.randint(0, 3, (n,), generator=g)] + 0.05 * torch.randn(n, 2, generator=g)
    else:
        cxy = torch.rand(n, 2, generator=g)
    wh = 0.01 + 0.59 * torch.rand(n, 2, generator=g) ** 2
    cls = torch.randint(0, nc, (n,), generator=g)
    return {"batch_idx": idx, "cls": cls.float().view(-1, 1), "bboxes": torch.cat((cxy.clamp(0, 1), wh), 1)}


def make_preds(*, batch: int, imgsz: int, nc: int, reg_max: int, seed: int,
               device: str | torch.device = "cpu", requires_grad: bool = True) -> list[Tensor]:
    """Random raw head outputs, one Tensor[B, 4 * reg_max + nc, imgsz/s, imgsz/s] per stride 8, 16, 32."""
    g = torch.Generator().manual_seed(seed)
    out = []
    for s in (8, 16, 32):
        t = torch.randn(batch, 4 * reg_max + nc, imgsz // s, imgsz // s, generator=g) * 2.0
        t[:, 4 * reg_max:] -= 2.0  # class logits mostly negative, as in training
        out.append(t.to(device).requires_grad_(requires_grad))
    return out


NET = SimpleNamespace(nc=3, reg_max=16, strides=(8, 16, 32))  # the small head the loss tests use
