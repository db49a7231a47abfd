"""The anchor-based YOLO loss of the Darknet lineage (YOLOv2 / v3 / v4).

Eager by design (SPEC G-2/T-2): assignment selects and de-duplicates, so it is never inside a
CUDA graph and may synchronise with the host.

Assignment (:func:`assign_anchors`, the YOLOv3 paper's rule): each ground truth goes to the one
anchor, over every level, whose shape (both boxes centred) has the highest IoU with it, at the
cell holding its centre. With ``assign_thresh`` (YOLOv4's ``iou_thresh=0.213``) every other
anchor whose shape-IoU exceeds it is assigned too, at its own level. Two ground truths landing on
the same (image, anchor, cell) keep the first one (Darknet overwrites; either way one survives).

Losses, per level:

- box: ``1 - GIoU`` (YOLOv3 here; the paper regresses the raw offsets with a squared error, see
  the README) or ``1 - CIoU`` (YOLOv4, its ``iou_loss=ciou``) between the decoded box and the
  ground truth, mean over the level's positives;
- objectness: BCE with target 1 at positives and 0 elsewhere, except that a negative whose
  decoded box overlaps any ground truth of its image with IoU > ``ignore_thresh`` (0.5) carries
  no loss (the paper's ignore rule); mean over all cells, levels weighted by ``balance``;
- class: BCE against one-hot targets at positives (sigmoid classes, v3 / v4) or cross-entropy
  (softmax classes, v2), mean over positives.

Gains (box 0.05, obj 1.0, cls 0.5, level balance 4.0 / 1.0 / 0.4 for strides 8 / 16 / 32) are
those of the Ultralytics YOLOv3 port's recipe; Darknet sums un-normalised terms instead, which
needs its own learning rates. The returned loss is ``(box + obj + cls) * batch size``.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Literal

import torch
import torch.nn.functional as F
from torch import Tensor, nn

from ...ops.boxes import bbox_ciou, bbox_giou, xywh_to_xyxy
from ...ops.targets import build_targets
from .postprocess import decode_xywh, level_view

BALANCE_3 = (4.0, 1.0, 0.4)


@dataclass(frozen=True, kw_only=True)
class Positives:
    """Positive cells of one level, all Tensor[P] int64: image ``b``, anchor ``a``, cell row ``gj``,
    column ``gi`` and ``gt`` (row of the flat target table)."""

    b: Tensor
    a: Tensor
    gj: Tensor
    gi: Tensor
    gt: Tensor


def flat_targets(batch: dict[str, Any], device: torch.device) -> Tensor:
    """Batch labels -> Tensor[N, 6] float32: image index, class, cx, cy, w, h (normalised)."""
    idx = batch["batch_idx"].to(device).float().view(-1, 1)
    cls = batch["cls"].to(device).float().view(-1, 1)
    boxes = batch["bboxes"].to(device).float().view(-1, 4)
    return torch.cat((idx, cls, boxes), 1)


def shape_iou(wh_a: Tensor, wh_b: Tensor) -> Tensor:
    """IoU of boxes sharing a centre. wh_a (Tensor[N, 2]), wh_b (Tensor[M, 2]) -> Tensor[N, M]."""
    inter = torch.minimum(wh_a[:, None], wh_b[None]).prod(-1)
    return inter / (wh_a.prod(-1)[:, None] + wh_b.prod(-1)[None] - inter + 1e-9)


def assign_anchors(targets: Tensor, *, grids: list[tuple[int, int]], anchors: Tensor,
                   img_hw: tuple[int, int], assign_thresh: float | None = None) -> list[Positives]:
    """Best-shape-IoU anchor per ground truth (plus, with ``assign_thresh``, every anchor above it).

    targets (Tensor[N, 6]): image index, class, cx, cy, w, h normalised; grids: (h, w) per level;
    anchors (Tensor[nl, na, 2]) input pixels; img_hw: network input (h, w). Returns per level the
    unique positive (b, a, gj, gi) with the target row each belongs to.
    """
    dev = targets.device
    nl, na = anchors.shape[:2]
    gwh = targets[:, 4:6] * torch.tensor([img_hw[1], img_hw[0]], device=dev, dtype=torch.float32)
    iou = shape_iou(gwh, anchors.reshape(-1, 2).to(dev).float())  # (N, nl * na)
    match = torch.zeros_like(iou, dtype=torch.bool)
    if targets.shape[0]:
        match[torch.arange(targets.shape[0], device=dev), iou.argmax(1)] = True
    if assign_thresh is not None:
        match |= iou > assign_thresh
    out = []
    for i, (h, w) in enumerate(grids):
        ti, a = match[:, i * na:(i + 1) * na].nonzero(as_tuple=True)
        gi = (targets[ti, 2] * w).long().clamp(0, w - 1)
        gj = (targets[ti, 3] * h).long().clamp(0, h - 1)
        b = targets[ti, 0].long()
        key = ((b * na + a) * h + gj) * w + gi
        uniq, inv = torch.unique(key, return_inverse=True)
        first = torch.full((uniq.numel(),), ti.numel(), dtype=torch.long, device=dev)
        first.scatter_reduce_(0, inv, torch.arange(ti.numel(), device=dev), reduce="amin")
        out.append(Positives(b=b[first], a=a[first], gj=gj[first], gi=gi[first], gt=ti[first]))
    return out


class AnchorYOLOLoss(nn.Module):
    """``criterion(preds, batch) -> (loss, loss_items)``.

    preds: per level Tensor[B, na * (5 + nc), H/s, W/s] raw logits (levels in ``net.strides``
    order; computed in float32). batch: ``batch_idx`` (Tensor[N] int64), ``cls`` (Tensor[N]),
    ``bboxes`` (Tensor[N, 4] normalised cx, cy, w, h). Returns loss (Tensor[] float32) =
    (box + obj + cls) * B for backward and loss_items (Tensor[3], detached): box, obj, cls, each
    multiplied by its gain. Anchors, strides, scale_xy and cls_act are read from ``net.head``.

    Example:
        >>> crit = model.build_criterion()  # doctest: +SKIP
        >>> loss, items = crit(model.net(imgs), batch)  # doctest: +SKIP
    """

    def __init__(self, net: Any, *, box_loss: Literal["giou", "ciou"] = "giou", assign_thresh: float | None = None,
                 ignore_thresh: float = 0.5, box: float = 0.05, obj: float = 1.0, cls: float = 0.5,
                 balance: tuple[float, ...] | None = None) -> None:
        super().__init__()
        if box_loss not in ("giou", "ciou"):
            raise ValueError(f"box_loss must be 'giou' or 'ciou', got {box_loss!r}")
        self._head = [net.head]  # a list: the head is not registered as a sub-module of the loss
        self.nc = int(net.head.nc)
        self.box_loss, self.assign_thresh, self.ignore_thresh = box_loss, assign_thresh, ignore_thresh
        # not named ``hyp``: the trainer overwrites a criterion's ``hyp`` with YOLOv9-recipe gains
        self.gains: dict[str, float] = {"box": box, "obj": obj, "cls": cls}
        nl = len(net.head.strides)
        self.balance = tuple(balance) if balance is not None else (BALANCE_3 if nl == 3 else (1.0,) * nl)

    def forward(self, preds: list[Tensor] | tuple[Tensor, ...], batch: dict[str, Any]) -> tuple[Tensor, Tensor]:
        head = self._head[0]
        na, strides = int(head.na), tuple(int(s) for s in head.strides)
        ps = [level_view(p.float(), na) for p in preds]  # (B, na, h, w, no) each
        bsz, dev = ps[0].shape[0], ps[0].device
        img_hw = (ps[0].shape[2] * strides[0], ps[0].shape[3] * strides[0])
        grids = [(p.shape[2], p.shape[3]) for p in ps]
        anchors = head.anchors.to(dev).float()  # (nl, na, 2) pixels, read live
        targets = flat_targets(batch, dev)
        pos = assign_anchors(targets, grids=grids, anchors=anchors, img_hw=img_hw, assign_thresh=self.assign_thresh)
        _, gt_boxes, gt_mask = build_targets(batch, batch_size=bsz, img_hw=img_hw, device=dev)  # (B, M, 4) xyxy px
        scale = torch.tensor([img_hw[1], img_hw[0]] * 2, device=dev, dtype=torch.float32)
        zero = sum(p.sum() for p in ps) * 0.0  # keeps the graph connected when nothing is assigned
        lbox, lobj, lcls = zero, zero, zero
        for i, (p, t) in enumerate(zip(ps, pos, strict=True)):
            h, w = grids[i]
            s, k = float(strides[i]), float(head.scale_xy[i])
            tobj = torch.zeros_like(p[..., 4])  # (B, na, h, w)
            weight = torch.ones_like(tobj)
            if gt_boxes.shape[1]:  # the ignore rule: negatives overlapping a ground truth
                with torch.no_grad():
                    gy, gx = torch.meshgrid(torch.arange(h, device=dev), torch.arange(w, device=dev), indexing="ij")
                    gxy = torch.stack((gx, gy), -1).float()
                    box = xywh_to_xyxy(decode_xywh(p[..., :4], gxy=gxy, anchor_wh=anchors[i].view(1, na, 1, 1, 2),
                                                   stride=s, scale_xy=k)).view(bsz, -1, 4)
                    ious = bbox_giou(box[:, :, None], gt_boxes[:, None])[0]  # (B, A_i, M)
                    best = ious.masked_fill(~gt_mask[:, None], 0.0).amax(2).view_as(tobj)
                    weight[best > self.ignore_thresh] = 0.0
            if t.b.numel():
                q = p[t.b, t.a, t.gj, t.gi]  # (P, no)
                gxy = torch.stack((t.gi, t.gj), 1).float()
                pbox = xywh_to_xyxy(decode_xywh(q[:, :4], gxy=gxy, anchor_wh=anchors[i][t.a], stride=s, scale_xy=k))
                tbox = xywh_to_xyxy(targets[t.gt, 2:6] * scale)
                iou = bbox_ciou(pbox, tbox) if self.box_loss == "ciou" else bbox_giou(pbox, tbox)[1]
                lbox = lbox + (1.0 - iou).mean()
                tobj[t.b, t.a, t.gj, t.gi] = 1.0
                weight[t.b, t.a, t.gj, t.gi] = 1.0
                tcls = targets[t.gt, 1].long()
                if head.cls_act == "softmax":
                    lcls = lcls + F.cross_entropy(q[:, 5:], tcls)
                else:
                    lcls = lcls + F.binary_cross_entropy_with_logits(q[:, 5:], F.one_hot(tcls, self.nc).float())
            lobj = lobj + F.binary_cross_entropy_with_logits(p[..., 4], tobj, weight=weight) * self.balance[i]
        g = self.gains
        items = torch.stack((lbox * g["box"], lobj * g["obj"], lcls * g["cls"]))
        return items.sum() * bsz, items.detach()
