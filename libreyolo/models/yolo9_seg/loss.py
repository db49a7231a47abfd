"""YOLOv9 instance-segmentation loss: the lineage's detection terms (task-aligned assignment,
CIoU box, BCE class, DFL) on the detection channels, plus a mask term.

Mask term: for every foreground anchor, the mask logits ``coefficients @ prototypes``
(Tensor[h/4 x w/4]) against the binary mask of the ground truth it was assigned to, per-pixel
binary cross-entropy summed over the pixels inside that ground-truth box (mask coordinates)
divided by the box area in mask pixels — the mean inside the box — then averaged over the
foreground anchors of the batch. Gains as YOLOv8-seg / YOLOv9-seg: box 7.5, seg 7.5 (the box
gain), cls 0.5, dfl 1.5.

Unlike the detection terms, the mask term gathers the foreground anchors (``nonzero``): one host
synchronisation per batch. It stays eager (SPEC T-2), as the whole criterion does.
"""

from __future__ import annotations

from typing import Any

import torch
import torch.nn.functional as F
from torch import Tensor

from ...ops.anchors import flatten_levels
from .._gelan.loss import YOLO9Loss


def crop_to_boxes(x: Tensor, boxes: Tensor) -> Tensor:
    """Zero ``x`` (Tensor[N, h, w]) outside each row's box (Tensor[N, 4] x1, y1, x2, y2 in pixel
    units of ``x``; a pixel is inside when its centre-less index ``i`` satisfies ``x1 <= i < x2``).

    Example:
        >>> crop_to_boxes(torch.ones(1, 3, 4), torch.tensor([[1.0, 0.0, 3.0, 2.0]]))[0].tolist()
        [[0.0, 1.0, 1.0, 0.0], [0.0, 1.0, 1.0, 0.0], [0.0, 0.0, 0.0, 0.0]]
    """
    n, h, w = x.shape
    cols = torch.arange(w, device=x.device, dtype=boxes.dtype)[None, None, :]
    rows = torch.arange(h, device=x.device, dtype=boxes.dtype)[None, :, None]
    x1, y1, x2, y2 = (boxes[:, i, None, None] for i in range(4))
    inside = (cols >= x1) & (cols < x2) & (rows >= y1) & (rows < y2)
    return x * inside


class YOLO9SegLoss(YOLO9Loss):
    """``criterion(preds, batch) -> (loss, loss_items)``.

    preds: the network output (three level tensors with ``4 * reg_max + nc + nm`` channels, then
    the prototypes Tensor[B, nm, h/4, w/4]). batch: as built by
    :func:`libreyolo.data.segment.collate_segment` (``batch_idx``, ``cls``, ``bboxes`` and
    ``masks`` Tensor[N, h/4, w/4] uint8, one per box, images in batch order).
    Returns loss = (box + seg + cls + dfl) * B and loss_items Tensor[4] (box, seg, cls, dfl, gains
    applied, detached).

    Example:
        >>> from libreyolo.models.yolo9_seg.nn import build_yolo9_seg
        >>> net = build_yolo9_seg(size="t", nc=2).train()
        >>> masks = torch.zeros(1, 16, 16, dtype=torch.uint8); masks[0, 4:12, 4:12] = 1
        >>> batch = {"batch_idx": torch.tensor([0]), "cls": torch.tensor([1]),
        ...          "bboxes": torch.tensor([[0.5, 0.5, 0.5, 0.5]]), "masks": masks}
        >>> loss, items = YOLO9SegLoss(net)(net(torch.rand(1, 3, 64, 64)), batch)
        >>> bool(torch.isfinite(loss)), items.shape
        (True, torch.Size([4]))
    """

    def __init__(self, net: Any, *, seg: float | None = None, **kw: Any) -> None:
        super().__init__(net, **kw)
        self.nm = int(net.nm)
        self.hyp["seg"] = float(seg) if seg is not None else self.hyp["box"]

    def forward(self, preds: list[Tensor] | tuple[Tensor, ...], batch: dict[str, Any]) -> tuple[Tensor, Tensor]:
        *levels, proto = preds
        split = 4 * self.reg_max + self.nc
        det = [lv[:, :split] for lv in levels]
        loss_box, loss_cls, loss_dfl, ctx = self.terms(det, batch)
        coef = flatten_levels([lv[:, split:] for lv in levels]).float()  # (B, nm, A)
        loss_seg = self._mask_term(coef, proto.float(), batch, ctx)
        gains = torch.tensor([self.hyp["box"], self.hyp["seg"], self.hyp["cls"], self.hyp["dfl"]],
                             dtype=torch.float32, device=proto.device)
        items = torch.stack((loss_box, loss_seg, loss_cls, loss_dfl)) * gains
        return items.sum() * proto.shape[0], items.detach()

    def _mask_term(self, coef: Tensor, proto: Tensor, batch: dict[str, Any], ctx: dict[str, Any]) -> Tensor:
        t = ctx["assignment"]
        bsz, _, mh, mw = proto.shape
        zero = (coef.sum() + proto.sum()) * 0.0  # keeps both in the graph when nothing is foreground
        masks = batch.get("masks")
        if masks is None or masks.shape[0] == 0:
            return zero
        masks = masks.to(proto.device, non_blocking=True).float()
        if tuple(masks.shape[1:]) != (mh, mw):
            masks = F.interpolate(masks[None], (mh, mw), mode="nearest")[0]
        idx = batch["batch_idx"].to(proto.device).long().reshape(-1)
        first = torch.cumsum(torch.bincount(idx, minlength=bsz), 0) - torch.bincount(idx, minlength=bsz)
        b_idx, a_idx = t.fg_mask.nonzero(as_tuple=True)  # host sync (module docstring)
        if b_idx.numel() == 0:
            return zero
        gt_rows = first[b_idx] + t.gt_idx[b_idx, a_idx]  # row of each foreground anchor's mask
        h_in, w_in = ctx["img_hw"]
        scale = torch.tensor([mw / w_in, mh / h_in, mw / w_in, mh / h_in], device=proto.device)
        boxes = t.bboxes[b_idx, a_idx].float() * scale  # (F, 4) mask pixels
        area = ((boxes[:, 2] - boxes[:, 0]) * (boxes[:, 3] - boxes[:, 1])).clamp(min=1.0)
        total = zero
        for b in range(bsz):  # one matrix product per image: coefficients @ its prototypes
            sel = b_idx == b
            logits = (coef[b][:, a_idx[sel]].T @ proto[b].reshape(self.nm, -1)).view(-1, mh, mw)
            bce = F.binary_cross_entropy_with_logits(logits, masks[gt_rows[sel]], reduction="none")
            total = total + (crop_to_boxes(bce, boxes[sel]).sum((1, 2)) / area[sel]).sum()
        return total / b_idx.numel()
