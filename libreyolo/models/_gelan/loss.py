"""YOLOv9 detection loss: task-aligned assignment, BCE class loss, CIoU + DFL box losses.

Eager by design (SPEC G-2/T-2): the assigner sorts and gathers, so it is never inside a CUDA
graph. It is written not to synchronise with the host: no boolean-mask indexing, ``nonzero``,
``.item()`` or data-dependent branches; the box and DFL terms are masked sums over every anchor
(weight 0 on background) rather than sums over gathered foreground anchors. Labels on the CPU
(the data loader's output) are padded there and copied asynchronously: no synchronisation at all
(checked on a GPU by ``tests/unit/models/test_yolo9_loss_speed_cuda.py``). Labels already on the
GPU cost two: sizing the padded ground-truth tensor (largest box count of an image) and one more
that is not located yet.

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

from ...ops.anchors import bbox2dist, dfl_loss, dist2bbox, flatten_levels, make_anchors
from ...ops.boxes import bbox_ciou
from ...ops.targets import build_targets, to_device


@dataclass(frozen=True, kw_only=True)
class Assignment:
    """Result of :class:`TaskAlignedAssigner` for B images and A anchors.

    labels (Tensor[B, A], int64), bboxes (Tensor[B, A, 4], xyxy, same units as the GT boxes),
    scores (Tensor[B, A, C], float soft targets; zero rows for background), fg_mask
    (Tensor[B, A], bool), gt_idx (Tensor[B, A], int64 index into the padded GT of the image),
    weight (Tensor[B, A], float): each anchor's soft-target value, equal to ``scores.sum(-1)``
    (zero for background).
    """

    labels: Tensor
    bboxes: Tensor
    scores: Tensor
    fg_mask: Tensor
    gt_idx: Tensor
    weight: Tensor


class TaskAlignedAssigner:
    """Task-aligned label assignment (TOOD): align = score**alpha * IoU**beta.

    For each ground truth the ``topk`` anchors of highest alignment whose centre lies strictly
    inside the box are candidates; an anchor claimed by several ground truths keeps the one it
    overlaps most. The one-hot class target is scaled per ground truth so that its best anchor
    gets that anchor's IoU (``align / max_align * max_iou``). No host synchronisation.
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
                              gt_idx=torch.zeros((b, a), dtype=torch.long, device=dev),
                              weight=torch.zeros((b, a), dtype=pd_scores.dtype, device=dev))
        gt_labels = gt_labels.long().clamp(0, c - 1)
        # score of each anchor for each GT's class: (B, M, A)
        scores = pd_scores.transpose(1, 2).gather(1, gt_labels[..., None].expand(b, m, a))
        overlaps = bbox_ciou(gt_bboxes[:, :, None, :], pd_bboxes[:, None, :, :]).clamp_(min=0)  # (B, M, A)
        align = scores.pow(self.alpha) * overlaps.pow(self.beta)  # (B, M, A)

        # candidate test: anchor centre strictly inside the GT box, i.e. min(l, t, r, b) > eps
        lt = anchor_points - gt_bboxes[:, :, None, :2]  # (B, M, A, 2)
        rb = gt_bboxes[:, :, None, 2:] - anchor_points
        valid = (torch.minimum(lt, rb).amin(-1) > self.eps) & mask_gt[..., None]  # (B, M, A)

        k = min(self.topk, a)
        topk_idx = (align * valid).topk(k, dim=-1).indices  # (B, M, k)
        mask_pos = torch.zeros_like(valid).scatter_(-1, topk_idx, True) & valid  # (B, M, A)

        # one GT per anchor: the candidate GT with the highest overlap. For an anchor with one
        # candidate that is the candidate; for one without, index 0 (masked by fg_mask below).
        fg_mask = mask_pos.any(1)  # (B, A)
        gt_idx = torch.where(mask_pos, overlaps, -1.0).argmax(1)  # (B, A)

        labels = gt_labels.gather(1, gt_idx)  # (B, A)
        bboxes = gt_bboxes.gather(1, gt_idx[..., None].expand(b, a, 4))  # (B, A, 4)

        # IoU-aware soft targets, normalised per GT: an anchor's align and overlap with its GT,
        # the per-GT maxima over its anchors (scatter-amax), gathered back per anchor.
        idx = gt_idx[:, None, :]  # (B, 1, A)
        pair = torch.cat((align.gather(1, idx), overlaps.gather(1, idx)), 1)  # (B, 2, A)
        pair = torch.where(fg_mask[:, None, :], pair, 0.0)
        idx2 = idx.expand(b, 2, a)
        per_gt = pair.new_zeros((b, 2, m)).scatter_reduce_(2, idx2, pair, "amax")  # (B, 2, M)
        best = per_gt.gather(2, idx2)  # (B, 2, A): max align, max IoU of each anchor's GT
        norm = pair[:, 0] * best[:, 1] / (best[:, 0] + self.eps)  # (B, A), 0 on background

        dtype = torch.promote_types(pd_scores.dtype, norm.dtype)
        scores_t = torch.zeros((b, a, c), dtype=dtype, device=dev).scatter_(-1, labels[..., None],
                                                                            norm[..., None].to(dtype))
        return Assignment(labels=labels, bboxes=bboxes, scores=scores_t, fg_mask=fg_mask, gt_idx=gt_idx,
                          weight=norm)


class YOLO9Loss(nn.Module):
    """``criterion(preds, batch) -> (loss, loss_items)``.

    preds: list of per-level Tensor[B, 4 * reg_max + nc, H/s, W/s] (box-distribution logits first,
    then class logits), any float dtype (computed in float32). batch: dict as built by
    ``libreyolo.data.dataset.collate_detection`` (``batch_idx``, ``cls``, ``bboxes``; on the CPU
    for no host synchronisation, see :func:`build_targets`).
    Returns loss (Tensor[], float32) = (box + cls + dfl) * B, for backward, and loss_items
    (Tensor[3], detached): box, cls, dfl, each already multiplied by its gain.

    The box and DFL terms are evaluated on every anchor and weighted by the soft target (zero on
    background), so nothing depends on the number of foreground anchors. Anchor grids are cached
    per feature-map shapes and device.

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
        self._anchor_cache: dict[tuple[Any, ...], tuple[Tensor, ...]] = {}
        self._gain_cache: dict[tuple[Any, ...], Tensor] = {}

    def _anchors(self, shapes: list[tuple[int, int]], device: torch.device) -> tuple[Tensor, ...]:
        """anchor_points (Tensor[A, 2], grid units), stride (Tensor[A, 1]), anchor pixels
        (Tensor[A, 2]) and DFL bin positions (Tensor[1, 1, R, 1]), all float32."""
        key = (tuple(shapes), str(device))
        hit = self._anchor_cache.get(key)
        if hit is None:
            # normal tensors even when the first call runs under inference_mode (a validation
            # loss): cached inference tensors could not be saved for a later training backward
            with torch.inference_mode(False):
                points, stride_t = make_anchors(shapes, self.strides, device=device)
                proj = torch.arange(self.reg_max, device=device, dtype=torch.float32).view(1, 1, -1, 1)
                hit = (points, stride_t, points * stride_t, proj)
            if len(self._anchor_cache) >= 8:  # multi-scale training: a handful of sizes
                self._anchor_cache.clear()
            self._anchor_cache[key] = hit
        return hit

    def _gains(self, device: torch.device) -> Tensor:
        """Tensor[3] of the box, cls, dfl gains on ``device`` (cached per value and device)."""
        key = (self.hyp["box"], self.hyp["cls"], self.hyp["dfl"], str(device))
        g = self._gain_cache.get(key)
        if g is None:
            with torch.inference_mode(False):  # see _anchors
                g = to_device(torch.tensor(key[:3], dtype=torch.float32), device)
            self._gain_cache = {key: g}
        return g

    def forward(self, preds: list[Tensor] | tuple[Tensor, ...], batch: dict[str, Any]) -> tuple[Tensor, Tensor]:
        loss_box, loss_cls, loss_dfl, _ = self.terms(preds, batch)
        items = torch.stack((loss_box, loss_cls, loss_dfl)) * self._gains(preds[0].device)
        return items.sum() * preds[0].shape[0], items.detach()

    def terms(self, preds: list[Tensor] | tuple[Tensor, ...],
              batch: dict[str, Any]) -> tuple[Tensor, Tensor, Tensor, dict[str, Any]]:
        """The box, class and DFL terms before their gains, and what a subclass's extra term needs
        (``assignment``, ``gt_bboxes``: the padded ground truth in input pixels; ``img_hw``)."""
        bsz = preds[0].shape[0]
        dev = preds[0].device
        r = self.reg_max
        shapes = [(int(f.shape[2]), int(f.shape[3])) for f in preds]
        img_hw = (shapes[0][0] * self.strides[0], shapes[0][1] * self.strides[0])
        # targets first: a host sync here (labels on the GPU) then waits for the network only
        gt_labels, gt_bboxes, mask_gt = build_targets(batch, batch_size=bsz, img_hw=img_hw, device=dev)

        x = flatten_levels(list(preds)).float()  # (B, 4R + C, A); one cast (same values as per level)
        reg, cls_logits = x.split((4 * r, self.nc), 1)
        pred_scores = cls_logits.transpose(1, 2)  # (B, A, C)
        anchor_points, stride_t, anchor_px, proj = self._anchors(shapes, dev)
        # = ops.anchors.dfl_expectation, with the bin positions cached
        prob = reg.view(bsz, 4, r, -1).softmax(2)  # (B, 4, R, A)
        pred_bboxes = dist2bbox((prob * proj).sum(2).transpose(1, 2), anchor_points)  # (B, A, 4) grid units

        t = self.assigner(pred_scores.detach().sigmoid(), pred_bboxes.detach() * stride_t,
                          anchor_px, gt_labels, gt_bboxes, mask_gt)
        tss = t.scores.sum().clamp(min=1.0)

        loss_cls = F.binary_cross_entropy_with_logits(pred_scores, t.scores, reduction="none").sum() / tss
        if gt_bboxes.shape[1]:
            target_bboxes = t.bboxes / stride_t  # grid units
            iou = bbox_ciou(pred_bboxes, target_bboxes)  # (B, A)
            loss_box = ((1.0 - iou) * t.weight).sum() / tss
            dist = reg.transpose(1, 2).reshape(bsz, -1, 4, r)  # (B, A, 4, R)
            ltrb = bbox2dist(anchor_points, target_bboxes, r)  # (B, A, 4)
            loss_dfl = (dfl_loss(dist, ltrb) * t.weight).sum() / tss
        else:
            loss_box = loss_dfl = pred_bboxes.sum() * 0.0
        return loss_box, loss_cls, loss_dfl, {"assignment": t, "gt_bboxes": gt_bboxes, "img_hw": img_hw}
