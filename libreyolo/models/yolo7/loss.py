"""YOLOv7 detection loss: lead-guided OTA assignment, CIoU box loss, IoU-scaled BCE objectness
and BCE class loss.

Eager by design (SPEC G-2/T-2): the assigner selects, sorts and loops over images, so it is
never inside a CUDA graph; it may synchronise with the host.

Assignment (the reference ``ComputeLossOTA``), in two steps:

1. Candidates (:func:`find_candidates`, YOLOv5-style): on every level, each ground truth whose
   width/height ratio to an anchor is within ``anchor_t`` (both ways) proposes, for that
   anchor, the cell holding its centre plus the two neighbouring cells closest to the centre
   (left/right and up/down, when the centre lies in that half of its cell).
2. Dynamic-k selection (:func:`ota_assign`, SimOTA-style), per image, over the candidates of all
   levels: cost = class cost + 3 * (-log IoU), the class cost being the BCE of
   ``sqrt(sigmoid(cls) * sigmoid(obj))`` against the one-hot class; each ground truth takes its
   ``k = max(1, int(sum of its 10 best IoUs))`` cheapest candidates; a candidate taken by
   several keeps the cheapest.

Losses per level: ``1 - CIoU`` (mean over positives), BCE objectness against the detached,
clamped CIoU at positives and 0 elsewhere (mean over all cells, weighted 4.0 / 1.0 / 0.4 for
strides 8 / 16 / 32), BCE class loss against one-hot targets (mean, only when ``nc > 1``).
Gains: box, obj, cls from the size's recipe; as the reference trainer does, ``cls`` is scaled by
``nc / 80`` and ``obj`` by ``(input pixels / 640^2)``.

Deviation from the reference, on purpose: candidate cells proposed by several ground truths
are de-duplicated before selection (the reference keeps duplicate columns, so one cell can
count twice towards a ground truth's ``k`` and its loss terms twice).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import torch
import torch.nn.functional as F
from torch import Tensor, nn

from ...ops.boxes import bbox_ciou, box_iou, xywh_to_xyxy
from .postprocess import decode_xywh, level_view

BALANCE = (4.0, 1.0, 0.4)
_NEIGHBOURS = ((0.0, 0.0), (1.0, 0.0), (0.0, 1.0), (-1.0, 0.0), (0.0, -1.0))


@dataclass(frozen=True, kw_only=True)
class LevelTargets:
    """Positive cells of one level. All Tensor[P], int64: image ``b``, anchor ``a``, cell row
    ``gj`` and column ``gi``, and ``gt`` (row of the flat target table it is assigned to;
    :func:`find_candidates` leaves it -1)."""

    b: Tensor
    a: Tensor
    gj: Tensor
    gi: Tensor
    gt: Tensor


def find_candidates(targets: Tensor, *, grids: list[tuple[int, int]], anchors: Tensor,
                    strides: tuple[int, ...], anchor_t: float = 4.0) -> list[LevelTargets]:
    """YOLOv5-style candidate cells (three per matching anchor at most), de-duplicated.

    targets (Tensor[N, 6] float): image index, class, cx, cy, w, h normalised to [0, 1];
    grids: (h, w) per level; anchors (Tensor[nl, na, 2]) pixels. Returns per level the unique
    (b, a, gj, gi) candidates (``gt`` = -1), sorted by that key.
    """
    dev = targets.device
    na = anchors.shape[1]
    off = torch.tensor(_NEIGHBOURS, device=dev) * 0.5  # (5, 2)
    out = []
    for i, (h, w) in enumerate(grids):
        gain = torch.tensor([w, h], device=dev, dtype=torch.float32)
        anc = anchors[i].to(dev).float() / strides[i]  # (na, 2) grid units
        gxy = targets[:, 2:4] * gain  # (N, 2)
        gwh = targets[:, 4:6] * gain
        r = gwh[None] / anc[:, None]  # (na, N, 2)
        ok = torch.maximum(r, 1.0 / r).amax(2) < anchor_t  # (na, N)
        ai, ti = ok.nonzero(as_tuple=True)
        gxy_s = gxy[ti]  # (M, 2)
        inv = gain - gxy_s
        near = (gxy_s % 1.0 < 0.5) & (gxy_s > 1.0)  # left / upper neighbour
        far = (inv % 1.0 < 0.5) & (inv > 1.0)  # right / lower neighbour
        sel = torch.stack((torch.ones_like(near[:, 0]), near[:, 0], near[:, 1], far[:, 0], far[:, 1]))
        o, m = sel.nonzero(as_tuple=True)  # (K,), (K,)
        cell = (gxy_s[m] - off[o]).long()
        gi = cell[:, 0].clamp(0, w - 1)
        gj = cell[:, 1].clamp(0, h - 1)
        b = targets[ti[m], 0].long()
        key = ((b * na + ai[m]) * h + gj) * w + gi
        key = torch.unique(key)  # sorted
        gi, rest = key % w, key // w
        gj, rest = rest % h, rest // h
        a, b = rest % na, rest // na
        out.append(LevelTargets(b=b, a=a, gj=gj, gi=gi, gt=torch.full_like(b, -1)))
    return out


@torch.no_grad()
def ota_assign(preds: list[Tensor], targets: Tensor, candidates: list[LevelTargets], *,
               anchors: Tensor, strides: tuple[int, ...], img_hw: tuple[int, int],
               topk: int = 10, iou_weight: float = 3.0) -> list[LevelTargets]:
    """Dynamic-k selection among the candidates, per image.

    preds: per level Tensor[B, na, h, w, 5 + nc] raw logits; targets (Tensor[N, 6]) as in
    :func:`find_candidates`; img_hw: network input (h, w) pixels. Returns per level the
    positive cells with ``gt`` the target row each is assigned to.
    """
    dev = targets.device
    nl = len(preds)
    scale = torch.tensor([img_hw[1], img_hw[0]] * 2, device=dev, dtype=torch.float32)
    picked: list[list[Tensor]] = [[] for _ in range(nl)]  # per level: [idx into candidates, gt]
    for img in torch.unique(targets[:, 0].long()).tolist():
        gt_rows = torch.nonzero(targets[:, 0].long() == img).squeeze(1)  # (G,)
        gt_xyxy = xywh_to_xyxy(targets[gt_rows, 2:6] * scale)  # (G, 4) pixels
        gt_cls = targets[gt_rows, 1].long()
        boxes, logits, lvl, pos = [], [], [], []
        for i, c in enumerate(candidates):
            sel = torch.nonzero(c.b == img).squeeze(1)
            p = preds[i][c.b[sel], c.a[sel], c.gj[sel], c.gi[sel]].float()  # (C_i, no)
            gxy = torch.stack((c.gi[sel], c.gj[sel]), 1).float()
            anc = anchors[i].to(dev).float()[c.a[sel]]
            boxes.append(xywh_to_xyxy(decode_xywh(p[:, :4], gxy=gxy, anchor_wh=anc, stride=float(strides[i]))))
            logits.append(p[:, 4:])
            lvl.append(torch.full_like(sel, i))
            pos.append(sel)
        pbox, plog, lvl_t, pos_t = (torch.cat(t) for t in (boxes, logits, lvl, pos))
        n_cand = pbox.shape[0]
        if n_cand == 0:
            continue
        iou = box_iou(gt_xyxy, pbox)  # (G, C)
        k = torch.clamp(iou.topk(min(topk, n_cand), dim=1).values.sum(1).int(), min=1)  # (G,)
        y = (plog[:, 1:].sigmoid() * plog[:, :1].sigmoid()).sqrt().clamp(1e-7, 1 - 1e-7)  # (C, nc)
        neg = -torch.log1p(-y)  # (C, nc): BCE of each class against target 0
        y_gt = y[:, gt_cls].T  # (G, C): probability of each GT's class
        cls_cost = neg.sum(1)[None] - torch.log(y_gt) + torch.log1p(-y_gt)  # (G, C)
        cost = cls_cost + iou_weight * -torch.log(iou + 1e-8)
        order = cost.argsort(dim=1)
        take = torch.arange(n_cand, device=dev)[None] < k[:, None]  # (G, C) by rank
        match = torch.zeros_like(take).scatter_(1, order, take)  # (G, C) by candidate
        fg = match.any(0)
        owner = torch.where(match.sum(0) > 1, cost.argmin(0), match.to(torch.uint8).argmax(0))
        for i in range(nl):
            m = fg & (lvl_t == i)
            picked[i].append(torch.stack((pos_t[m], gt_rows[owner[m]])))
    out = []
    for i, c in enumerate(candidates):
        if picked[i]:
            sel, gt = torch.cat(picked[i], 1)
        else:
            sel = gt = torch.zeros(0, dtype=torch.long, device=dev)
        out.append(LevelTargets(b=c.b[sel], a=c.a[sel], gj=c.gj[sel], gi=c.gi[sel], gt=gt))
    return out


def flat_targets(batch: dict[str, Any], device: torch.device) -> Tensor:
    """Batch labels -> Tensor[N, 6] float32: image index, class, cx, cy, w, h (normalised)."""
    idx = batch["batch_idx"].to(device).float().view(-1, 1)
    cls = batch["cls"].to(device).float().view(-1, 1)
    boxes = batch["bboxes"].to(device).float().view(-1, 4)
    return torch.cat((idx, cls, boxes), 1)


class YOLO7Loss(nn.Module):
    """``criterion(preds, batch) -> (loss, loss_items)``.

    preds: list of per-level Tensor[B, na * (5 + nc), H/s, W/s] raw logits (any float dtype;
    computed in float32). batch: dict with ``batch_idx`` (Tensor[N], int64), ``cls``
    (Tensor[N]), ``bboxes`` (Tensor[N, 4] normalised cx, cy, w, h). Returns loss (Tensor[],
    float32) = (box + obj + cls) * B, for backward, and loss_items (Tensor[3], detached): box,
    obj, cls, each already multiplied by its gain.

    Example:
        >>> crit = model.build_criterion()  # doctest: +SKIP
        >>> loss, items = crit(model.net(imgs), batch)  # doctest: +SKIP
    """

    def __init__(self, net: Any, *, box: float = 0.05, obj: float = 0.7, cls: float = 0.3,
                 anchor_t: float = 4.0, balance: tuple[float, ...] = BALANCE,
                 topk: int = 10, iou_weight: float = 3.0) -> None:
        super().__init__()
        self.nc = int(net.nc)
        self.na = int(net.na)
        self.strides = tuple(int(s) for s in net.strides)
        self._head = [net.head]  # a list, so the head is not registered as a sub-module here
        # Loss gains as in the reference recipe; the nc / 80 and input-area scalings are applied
        # in forward. Deliberately not named ``hyp``: the trainer overwrites a criterion's
        # ``hyp`` keys with its own (YOLOv9-recipe) defaults, which are wrong for this loss.
        self.gains: dict[str, float] = {"box": box, "obj": obj, "cls": cls}
        self.anchor_t, self.balance, self.topk, self.iou_weight = anchor_t, tuple(balance), topk, iou_weight

    def forward(self, preds: list[Tensor] | tuple[Tensor, ...], batch: dict[str, Any]) -> tuple[Tensor, Tensor]:
        ps = [level_view(p.float(), self.na) for p in preds]  # (B, na, h, w, no) each
        bsz, dev = ps[0].shape[0], ps[0].device
        img_hw = (ps[0].shape[2] * self.strides[0], ps[0].shape[3] * self.strides[0])
        targets = flat_targets(batch, dev)
        grids = [(p.shape[2], p.shape[3]) for p in ps]
        anchors = self._head[0].anchors.to(dev).float()  # (nl, na, 2) pixels, read live
        cand = find_candidates(targets, grids=grids, anchors=anchors, strides=self.strides,
                               anchor_t=self.anchor_t)
        assigned = ota_assign(ps, targets, cand, anchors=anchors, strides=self.strides, img_hw=img_hw,
                              topk=self.topk, iou_weight=self.iou_weight)
        zero = sum(p.sum() for p in ps) * 0.0  # keeps the graph connected when nothing is assigned
        lbox, lobj, lcls = zero, zero, zero
        for i, (p, t) in enumerate(zip(ps, assigned, strict=True)):
            h, w = grids[i]
            tobj = torch.zeros_like(p[..., 4])  # (B, na, h, w)
            if t.b.numel():
                q = p[t.b, t.a, t.gj, t.gi]  # (P, no)
                s = q[:, :4].sigmoid() * 2
                anc = anchors[i][t.a] / self.strides[i]  # grid units
                pbox = torch.cat((s[:, :2] - 0.5, s[:, 2:4].square() * anc), 1)  # cell-relative xywh
                tbox = targets[t.gt, 2:6] * torch.tensor([w, h, w, h], device=dev, dtype=torch.float32)
                tbox = torch.cat((tbox[:, :2] - torch.stack((t.gi, t.gj), 1).float(), tbox[:, 2:]), 1)
                ciou = bbox_ciou(xywh_to_xyxy(pbox), xywh_to_xyxy(tbox))
                lbox = lbox + (1.0 - ciou).mean()
                tobj[t.b, t.a, t.gj, t.gi] = ciou.detach().clamp(min=0).to(tobj.dtype)
                if self.nc > 1:
                    onehot = F.one_hot(targets[t.gt, 1].long(), self.nc).float()
                    lcls = lcls + F.binary_cross_entropy_with_logits(q[:, 5:], onehot)
            lobj = lobj + F.binary_cross_entropy_with_logits(p[..., 4], tobj) * self.balance[i]
        g = self.gains
        obj_gain = g["obj"] * img_hw[0] * img_hw[1] / 640**2
        items = torch.stack((lbox * g["box"], lobj * obj_gain, lcls * g["cls"] * self.nc / 80))
        return items.sum() * bsz, items.detach()
