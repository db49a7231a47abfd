"""YOLOv9 pose loss: the lineage's detection terms (task-aligned assignment, CIoU box, BCE class,
DFL) on the detection channels, plus two keypoint terms on the foreground anchors the assigner
picked.

- pose (location): for every foreground anchor and every labelled keypoint (``v > 0``) of the
  ground truth it was assigned to, ``1 - exp(-d^2 / (2 * area * (2 sigma)^2))`` (one minus the
  keypoint's OKS term: ``d`` the pixel distance of the decoded keypoint, ``area`` the assigned box
  area in pixels, sigmas :func:`libreyolo.ops.keypoints.loss_sigmas`), averaged over those
  keypoints. The area normalisation makes the term scale-free, as OKS is.
- kobj (visibility): binary cross-entropy of every keypoint's visibility logit of every
  foreground anchor against ``v > 0``, averaged.

Gains as Ultralytics' YOLOv8-pose recipe: box 7.5, pose 12.0, kobj 1.0, cls 0.5, dfl 1.5. The
keypoint terms gather the foreground anchors (``nonzero``): one host synchronisation per batch.
The criterion stays eager (SPEC T-2).
"""

from __future__ import annotations

from typing import Any

import torch
import torch.nn.functional as F
from torch import Tensor

from ...ops.anchors import flatten_levels
from ...ops.keypoints import keypoint_similarity, loss_sigmas
from .._gelan.loss import YOLO9Loss
from .nn import decode_keypoints


def assigned_rows(batch_idx: Tensor, fg_mask: Tensor, gt_idx: Tensor) -> tuple[Tensor, Tensor, Tensor]:
    """The foreground anchors of an assignment and the batch row of the object each was assigned to.

    batch_idx (Tensor[N]): image of each object, images in order (the collate order); fg_mask,
    gt_idx (Tensor[B, A]): the assigner's. Returns (image index, anchor index, object row), each
    Tensor[F] int64. Synchronises with the host (``nonzero``).

    Example:
        >>> fg = torch.tensor([[False, True], [True, False]]); gi = torch.tensor([[0, 1], [0, 0]])
        >>> [t.tolist() for t in assigned_rows(torch.tensor([0, 0, 1]), fg, gi)]
        [[0, 1], [1, 0], [1, 2]]
    """
    bsz = fg_mask.shape[0]
    idx = batch_idx.to(fg_mask.device).long().reshape(-1)
    counts = torch.bincount(idx, minlength=bsz)
    first = torch.cumsum(counts, 0) - counts
    b_idx, a_idx = fg_mask.nonzero(as_tuple=True)
    return b_idx, a_idx, first[b_idx] + gt_idx[b_idx, a_idx]


class YOLO9PoseLoss(YOLO9Loss):
    """``criterion(preds, batch) -> (loss, loss_items)``.

    preds: the network output (three level tensors with ``4 * reg_max + nc + 3 * nkpt`` channels).
    batch: as built by :func:`libreyolo.data.pose.collate_pose` (``batch_idx``, ``cls``, ``bboxes``
    normalised cx cy w h, ``keypoints`` Tensor[N, K, 3] x, y normalised to the input, v; images in
    batch order). Returns loss = (box + pose + kobj + cls + dfl) * B and loss_items Tensor[5] (box,
    pose, kobj, cls, dfl, gains applied, detached).

    Example:
        >>> from libreyolo.models.yolo9_pose.nn import build_yolo9_pose
        >>> net = build_yolo9_pose(size="t", nc=2, nkpt=3).train()
        >>> kpts = torch.tensor([[[0.4, 0.4, 2.0], [0.6, 0.4, 2.0], [0.5, 0.6, 0.0]]])
        >>> batch = {"batch_idx": torch.tensor([0]), "cls": torch.tensor([1]),
        ...          "bboxes": torch.tensor([[0.5, 0.5, 0.5, 0.5]]), "keypoints": kpts}
        >>> loss, items = YOLO9PoseLoss(net)(net(torch.rand(1, 3, 64, 64)), batch)
        >>> bool(torch.isfinite(loss)), items.shape
        (True, torch.Size([5]))
    """

    def __init__(self, net: Any, *, pose: float = 12.0, kobj: float = 1.0, **kw: Any) -> None:
        super().__init__(net, **kw)
        self.nkpt = int(net.nkpt)
        self.hyp.update(pose=float(pose), kobj=float(kobj))
        self.sigmas = torch.tensor(loss_sigmas(self.nkpt), dtype=torch.float32)

    def forward(self, preds: list[Tensor] | tuple[Tensor, ...], batch: dict[str, Any]) -> tuple[Tensor, Tensor]:
        split = 4 * self.reg_max + self.nc
        det = [lv[:, :split] for lv in preds]
        loss_box, loss_cls, loss_dfl, ctx = self.terms(det, batch)
        raw = flatten_levels([lv[:, split:] for lv in preds]).float()  # (B, 3K, A)
        loss_pose, loss_kobj = self._keypoint_terms(raw, batch, ctx, [tuple(lv.shape[2:]) for lv in preds])
        dev = raw.device
        gains = torch.tensor([self.hyp[k] for k in ("box", "pose", "kobj", "cls", "dfl")], dtype=torch.float32,
                             device=dev)
        items = torch.stack((loss_box, loss_pose, loss_kobj, loss_cls, loss_dfl)) * gains
        return items.sum() * raw.shape[0], items.detach()

    def _keypoint_terms(self, raw: Tensor, batch: dict[str, Any], ctx: dict[str, Any],
                        shapes: list[tuple[int, int]]) -> tuple[Tensor, Tensor]:
        t = ctx["assignment"]
        zero = raw.sum() * 0.0  # keeps the branch in the graph when nothing is foreground
        kpts = batch.get("keypoints")
        if kpts is None or kpts.shape[0] == 0:
            return zero, zero
        dev = raw.device
        kpts = kpts.to(dev, non_blocking=True).float()
        b_idx, a_idx, rows = assigned_rows(batch["batch_idx"], t.fg_mask, t.gt_idx)  # host sync (module docstring)
        if b_idx.numel() == 0:
            return zero, zero
        h_in, w_in = ctx["img_hw"]
        gt = kpts[rows]  # (F, K, 3): the assigned object's keypoints
        gt_xy = gt[..., :2] * torch.tensor([w_in, h_in], device=dev, dtype=torch.float32)
        vis = (gt[..., 2] > 0).float()  # (F, K)
        points, stride_t, _, _ = self._anchors(shapes, dev)
        pred_raw = raw[b_idx, :, a_idx].view(-1, self.nkpt, 3)  # (F, K, 3)
        pred = decode_keypoints(pred_raw, points[a_idx], stride_t[a_idx])
        box = t.bboxes[b_idx, a_idx].float()  # (F, 4) xyxy input pixels
        area = (box[:, 2] - box[:, 0]) * (box[:, 3] - box[:, 1])
        sim = keypoint_similarity(pred, gt_xy, area, self.sigmas.to(dev))
        loss_pose = ((1.0 - sim) * vis).sum() / vis.sum().clamp(min=1.0)
        loss_kobj = F.binary_cross_entropy_with_logits(pred_raw[..., 2], vis)
        return loss_pose, loss_kobj
