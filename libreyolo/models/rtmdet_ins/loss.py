"""RTMDet-Ins loss: the RTMDet detection terms (dynamic soft label assignment, Quality Focal Loss,
GIoU; :class:`libreyolo.models._rtmdet.loss.RTMDetLoss`) plus a dice mask term.

As the reference recipe (``RTMDetInsSepBNHead`` with ``DiceLoss(loss_weight=2.0, eps=5e-6)``):

* The assigner's soft centre prior measures distances to each object's **mask centre of mass**
  (the box centre for an empty mask), not its box centre.
* Mask term: for every positive point, the dynamic convolution of its kernel over its image's mask
  features (logits at stride 8, bilinearly upsampled x2 to stride 4, ``mask_loss_stride = 4``)
  against the mask of the object it was assigned to; dice loss ``1 - 2 sum(p t) / (sum(p^2) +
  sum(t^2))`` (``eps`` added to each sum) per positive, summed and divided by the number of
  positives (at least 1), weight 2.0.

Eager (SPEC G-2/T-2): the mask term gathers the positives (``nonzero``, one host sync per batch).
"""

from __future__ import annotations

from typing import Any

import torch
import torch.nn.functional as F
from torch import Tensor

from .._rtmdet.loss import RTMDetLoss, pad_rows
from .postprocess import MASK_STRIDE, dynamic_mask_logits

DICE_EPS = 5e-6


def dice_loss(logits: Tensor, target: Tensor, *, eps: float = DICE_EPS) -> Tensor:
    """Dice loss of each mask (V-Net form, squares in the denominator).

    logits (Tensor[n, h, w]) mask logits, target (Tensor[n, h, w]) in {0, 1} -> Tensor[n]:
    ``1 - 2 a / (b + c)`` with ``a = sum(p t)``, ``b = sum(p^2) + eps``, ``c = sum(t^2) + eps``,
    ``p = sigmoid(logits)``.

    Example:
        >>> t = torch.zeros(1, 4, 4); t[0, :2] = 1
        >>> round(float(dice_loss(torch.where(t > 0, 20.0, -20.0), t)[0]), 4)
        0.0
    """
    p = logits.float().sigmoid().flatten(1)
    t = target.float().flatten(1)
    a = (p * t).sum(1)
    b = (p * p).sum(1) + eps
    c = (t * t).sum(1) + eps
    return 1.0 - 2.0 * a / (b + c)


def mask_centers(masks: Tensor, boxes: Tensor, *, mask_stride: float) -> Tensor:
    """Centre of mass of each mask in input pixels (pixel-index convention: input pixel ``i``
    sits at ``i``, so mask pixel ``j`` at stride ``s`` covers ``s j .. s j + s - 1`` and counts at
    ``s j + (s - 1) / 2``); an empty mask gives its box centre.

    masks (Tensor[N, h, w]), boxes (Tensor[N, 4] xyxy input pixels) -> Tensor[N, 2] (x, y).

    Example:
        >>> m = torch.zeros(1, 4, 4); m[0, 1, 2] = 1
        >>> mask_centers(m, torch.zeros(1, 4), mask_stride=4).tolist()
        [[9.5, 5.5]]
    """
    m = masks.float()
    n, h, w = m.shape
    area = m.sum((1, 2))
    ys = torch.arange(h, device=m.device, dtype=torch.float32)
    xs = torch.arange(w, device=m.device, dtype=torch.float32)
    cx = (m.sum(1) * xs).sum(1) / area.clamp(min=1.0)
    cy = (m.sum(2) * ys).sum(1) / area.clamp(min=1.0)
    com = torch.stack((cx, cy), 1) * mask_stride + (mask_stride - 1) / 2
    box_c = (boxes[:, :2] + boxes[:, 2:]) / 2
    return torch.where(area[:, None] > 0, com, box_c)


class RTMDetInsLoss(RTMDetLoss):
    """``criterion(preds, batch) -> (loss, loss_items)``.

    preds: the network output (three level tensors with ``4 + nc + 169`` channels, then the mask
    features Tensor[B, 8, h/8, w/8]). batch: as built by
    :func:`libreyolo.data.segment.collate_segment` (``batch_idx``, ``cls``, ``bboxes`` normalised
    cx, cy, w, h, and ``masks`` Tensor[N, h/4, w/4] uint8, one per box). Returns loss = (cls + box +
    seg) * B and loss_items Tensor[3] (cls, box, seg, weights applied, detached).

    Example:
        >>> from libreyolo.models.rtmdet_ins.nn import build_rtmdet_ins
        >>> net = build_rtmdet_ins(size="t", nc=2).train()
        >>> masks = torch.zeros(1, 16, 16, dtype=torch.uint8); masks[0, 4:12, 4:12] = 1
        >>> batch = {"batch_idx": torch.tensor([0]), "cls": torch.tensor([1]),
        ...          "bboxes": torch.tensor([[0.5, 0.5, 0.5, 0.5]]), "masks": masks}
        >>> loss, items = RTMDetInsLoss(net)(net(torch.rand(1, 3, 64, 64)), batch)
        >>> bool(torch.isfinite(loss)), items.shape
        (True, torch.Size([3]))
    """

    def __init__(self, net: Any, *, seg_weight: float = 2.0, **kw: Any) -> None:
        super().__init__(net, **kw)
        self.loss_weights["seg"] = float(seg_weight)
        self.num_params = int(net.num_params)

    def forward(self, preds: list[Tensor] | tuple[Tensor, ...], batch: dict[str, Any]) -> tuple[Tensor, Tensor]:
        *levels, mask_feat = preds
        bsz = mask_feat.shape[0]
        img_hw = (levels[0].shape[2] * self.strides[0], levels[0].shape[3] * self.strides[0])
        masks = self._masks(batch, img_hw, device=mask_feat.device)
        centers = None
        if masks is not None and masks.shape[0]:
            h, w = img_hw
            boxes = batch["bboxes"].to(mask_feat.device).float().view(-1, 4)
            xyxy = torch.cat((boxes[:, :2] - boxes[:, 2:] / 2, boxes[:, :2] + boxes[:, 2:] / 2), 1)
            xyxy = xyxy * torch.tensor([w, h, w, h], dtype=torch.float32, device=xyxy.device)
            centers = pad_rows(mask_centers(masks, xyxy, mask_stride=h / masks.shape[1]), batch["batch_idx"],
                               batch_size=bsz)
        loss_cls, loss_box, ctx = self.terms(levels, batch, gt_centers=centers)
        loss_seg = self._mask_term(levels, mask_feat.float(), masks, batch, ctx)
        w = self.loss_weights
        items = torch.stack((loss_cls * w["cls"], loss_box * w["box"], loss_seg * w["seg"]))
        return items.sum() * bsz, items.detach()

    @staticmethod
    def _masks(batch: dict[str, Any], img_hw: tuple[int, int], *, device: torch.device) -> Tensor | None:
        """The batch's masks (Tensor[N, H/4, W/4] float) at stride 4 of the network input, or None."""
        masks = batch.get("masks")
        if masks is None:
            return None
        masks = masks.to(device, non_blocking=True).float()
        mh, mw = img_hw[0] // MASK_STRIDE, img_hw[1] // MASK_STRIDE
        if masks.shape[0] and tuple(masks.shape[1:]) != (mh, mw):
            masks = F.interpolate(masks[None], (mh, mw), mode="nearest")[0]
        return masks

    def _mask_term(self, levels: list[Tensor], mask_feat: Tensor, masks: Tensor | None, batch: dict[str, Any],
                   ctx: dict[str, Any]) -> Tensor:
        t = ctx["assignment"]
        kernels = torch.cat([lv[:, 4 + self.nc:].float().flatten(2) for lv in levels], 2)  # (B, 169, A)
        zero = (kernels.sum() + mask_feat.sum()) * 0.0  # keeps both in the graph when nothing is positive
        if masks is None or masks.shape[0] == 0:
            return zero
        b_idx, a_idx = t.fg_mask.nonzero(as_tuple=True)  # host sync (module docstring)
        if b_idx.numel() == 0:
            return zero
        bsz = mask_feat.shape[0]
        rows = pad_rows(torch.arange(masks.shape[0], device=masks.device), batch["batch_idx"], batch_size=bsz)
        gt_rows = rows[b_idx, t.gt_idx[b_idx, a_idx]]  # the mask of each positive's object
        points, strides = ctx["points"], ctx["strides"]
        feat_stride = self.strides[0]
        total = zero
        for b in range(bsz):  # one dynamic convolution per image, over its own mask features
            sel = b_idx == b
            if not bool(sel.any()):
                continue
            a = a_idx[sel]
            logits = dynamic_mask_logits(mask_feat[b], kernels[b][:, a].T, points[a], strides[a],
                                         feat_stride=feat_stride)
            logits = F.interpolate(logits[None], scale_factor=feat_stride // MASK_STRIDE, mode="bilinear",
                                   align_corners=False)[0]
            total = total + dice_loss(logits, masks[gt_rows[sel]]).sum()
        return total / max(b_idx.numel(), 1)
