"""The YOLOv1 loss: the paper's sum-squared error (arXiv:1506.02640, eq. 3), as Darknet's
``[detection]`` layer computes it (``detection_layer.c``: ``rescore=1``, ``sqrt=1``).

Eager by design (SPEC G-2 / T-2): assignment selects and de-duplicates.

- Each ground truth belongs to the cell holding its centre; a cell holds one object (the first
  label of the image that falls in it; Darknet keeps the first after shuffling its labels).
- Of that cell's ``B`` boxes the **responsible** one is the box whose prediction has the highest
  IoU with the truth; when no box overlaps it, the one with the smallest RMSE of
  ``(x, y, w, h)`` (all in image units) — Darknet's rule.
- ``coord``: ``lambda_coord (5) * [(x - x*)^2 + (y - y*)^2 + (sqrt w - sqrt w*)^2 + (sqrt h - sqrt h*)^2]``
  for responsible boxes (x, y offsets in the cell; the network predicts the square roots).
- ``obj``: ``(C - IoU)^2`` for responsible boxes (the confidence target is the IoU of the
  predicted box with the truth, not differentiated: Darknet's ``rescore``).
- ``noobj``: ``lambda_noobj (0.5) * C^2`` for every other box.
- ``cls``: ``sum_c (p(c) - 1[c = c*])^2`` at cells holding an object.

Every term is a sum; ``loss_items`` are the four sums divided by the batch size (per image), and
the returned loss is their total times the batch size — the batch's plain sum, Darknet's cost.
"""

from __future__ import annotations

from typing import Any

import torch
from torch import Tensor, nn

from ...ops.boxes import box_iou, xywh_to_xyxy
from .postprocess import cell_grid, split

LAMBDA_COORD = 5.0
LAMBDA_NOOBJ = 0.5


def assign_cells(targets: Tensor, *, S: int) -> tuple[Tensor, Tensor, Tensor]:
    """targets (Tensor[N, 6]: image index, class, cx, cy, w, h normalised) -> (image Tensor[P],
    cell Tensor[P] (row * S + col), target row Tensor[P]): one target per occupied cell, the first
    in label order."""
    dev = targets.device
    col = (targets[:, 2] * S).long().clamp(0, S - 1)
    row = (targets[:, 3] * S).long().clamp(0, S - 1)
    b = targets[:, 0].long()
    key = b * S * S + row * S + col
    uniq, inv = torch.unique(key, return_inverse=True)
    first = torch.full((uniq.numel(),), targets.shape[0], dtype=torch.long, device=dev)
    first.scatter_reduce_(0, inv, torch.arange(targets.shape[0], device=dev), reduce="amin")
    return b[first], row[first] * S + col[first], first


def responsible(pred_xyxy: Tensor, pred_xywh: Tensor, truth_xyxy: Tensor, truth_xywh: Tensor) -> tuple[Tensor, Tensor]:
    """Per positive cell the responsible box and its IoU with the truth.

    pred_* (Tensor[P, B, 4]) the cell's predicted boxes (xyxy / xywh, image units), truth_*
    (Tensor[P, 4]). Returns (index Tensor[P] int64, IoU Tensor[P])."""
    p, nb = pred_xyxy.shape[:2]
    iou = box_iou(pred_xyxy.reshape(-1, 4), truth_xyxy).reshape(p, nb, p)
    iou = iou[torch.arange(p), :, torch.arange(p)]  # (P, B): each cell against its own truth
    rmse = (pred_xywh - truth_xywh[:, None]).square().sum(-1).sqrt()  # (P, B)
    pick = torch.where((iou > 0).any(1), iou.argmax(1), rmse.argmin(1))
    return pick, iou.gather(1, pick[:, None])[:, 0]


class YOLO1Loss(nn.Module):
    """``criterion(raw, batch) -> (loss, loss_items)``.

    raw: Tensor[N, S*S*(C + 5B)] (the network's output, computed in float32); batch:
    ``batch_idx`` (Tensor[M] int64), ``cls`` (Tensor[M]), ``bboxes`` (Tensor[M, 4] normalised
    cx, cy, w, h). Returns loss (Tensor[] float32, the batch's sum) and loss_items (Tensor[4],
    detached): coord, obj, noobj, cls per image.

    Example:
        >>> from libreyolo.models.yolo1.nn import build_yolo1
        >>> net = build_yolo1(size="tiny", nc=3, width=1 / 16, input_size=64)
        >>> batch = {"batch_idx": torch.tensor([0]), "cls": torch.tensor([1.0]),
        ...          "bboxes": torch.tensor([[0.5, 0.5, 0.2, 0.3]])}
        >>> loss, items = YOLO1Loss(net)(net(torch.rand(2, 3, 64, 64)), batch)
        >>> items.shape, bool(loss > 0)
        (torch.Size([4]), True)
    """

    def __init__(self, net: Any, *, lambda_coord: float = LAMBDA_COORD, lambda_noobj: float = LAMBDA_NOOBJ) -> None:
        super().__init__()
        self.S, self.B, self.nc = int(net.S), int(net.B), int(net.nc)
        # not named ``hyp``: the trainer overwrites a criterion's ``hyp`` with YOLOv9-recipe gains
        self.gains = {"coord": float(lambda_coord), "noobj": float(lambda_noobj)}

    def forward(self, raw: Any, batch: dict[str, Any]) -> tuple[Tensor, Tensor]:
        raw = raw[0] if isinstance(raw, (list, tuple)) else raw
        S, B, nc = self.S, self.B, self.nc
        cls, conf, box = split(raw, S=S, B=B, nc=nc)  # (N, S*S, nc), (N, S*S, B), (N, S*S, B, 4)
        n, dev = raw.shape[0], raw.device
        idx = batch["batch_idx"].to(dev).float().view(-1, 1)
        targets = torch.cat((idx, batch["cls"].to(dev).float().view(-1, 1), batch["bboxes"].to(dev).float().view(-1, 4)), 1)
        bi, ci, ti = assign_cells(targets, S=S)
        noobj = torch.ones_like(conf)
        zero = raw.float().sum() * 0.0  # keeps the graph connected when nothing is assigned
        l_coord, l_obj, l_cls = zero, zero, zero
        if bi.numel():
            t = targets[ti]  # (P, 6)
            q = box[bi, ci]  # (P, B, 4) raw x, y, sqrt w, sqrt h
            grid = cell_grid(S, device=dev)[ci]  # (P, 1, 2) col, row
            with torch.no_grad():
                pxywh = torch.cat(((q[..., :2] + grid) / S, q[..., 2:4].square()), -1)  # image units
                pick, iou = responsible(xywh_to_xyxy(pxywh), pxywh, xywh_to_xyxy(t[:, 2:6]), t[:, 2:6])
            r = q[torch.arange(q.shape[0], device=dev), pick]  # (P, 4)
            off = t[:, 2:4] * S - grid[:, 0]  # the centre's offset in its cell
            want = torch.cat((off, t[:, 4:6].clamp(min=0).sqrt()), 1)
            l_coord = self.gains["coord"] * (r - want).square().sum()
            l_obj = (conf[bi, ci, pick] - iou).square().sum()
            noobj[bi, ci, pick] = 0.0
            onehot = torch.nn.functional.one_hot(t[:, 1].long(), nc).float()
            l_cls = (cls[bi, ci] - onehot).square().sum()
        l_noobj = self.gains["noobj"] * (conf.square() * noobj).sum()
        items = torch.stack((l_coord, l_obj, l_noobj, l_cls)) / n
        return items.sum() * n, items.detach()
