"""Keypoints on a dense DFL detector (the GELAN lineage's head layout, also YOLO-NAS'): the
keypoint decode, the keypoint loss terms and the eager postprocess that the pose families share.

Layout: per level Tensor[B, 4 * reg_max + nc + 3 * nkpt, h, w]: box-distribution logits, class
logits, then per keypoint ``(x, y, visibility logit)``. A keypoint of the anchor at grid cell
(i, j) of stride s decodes to ``x = (scale * raw_x + j) * s``, ``y = (scale * raw_y + i) * s``
input pixels and ``sigmoid(raw_v)``. The network names its ``scale`` as ``net.kpt_scale``: 2 for
Ultralytics' ``Pose`` head (yolo9_pose, the default when the attribute is absent), 1 for
YOLO-NAS-Pose (super-gradients' ``(offset + anchor - 0.5) * stride``).

Loss (:class:`DensePoseLoss`): the lineage's detection terms (task-aligned assignment, CIoU box,
BCE class, DFL) on the detection channels, plus two keypoint terms on the foreground anchors
the assigner picked:

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
from torch import Tensor, nn

from ...errors import ConfigError
from ...ops.anchors import dfl_expectation, dist2bbox, flatten_levels, make_anchors
from ...ops.keypoints import keypoint_similarity, loss_sigmas
from ...ops.nms import non_max_suppression
from .loss import YOLO9Loss

MAX_CANDIDATES = 30_000
KPT_SCALE = 2.0  # Ultralytics' Pose head; a network without ``kpt_scale`` decodes this way


def kpt_scale(net: Any) -> float:
    """The keypoint offset scale a network names (``net.kpt_scale``), 2 when it names none."""
    return float(getattr(net, "kpt_scale", KPT_SCALE))


def decode_keypoints(raw: Tensor, anchors: Tensor, strides: Tensor, *, scale: float = KPT_SCALE) -> Tensor:
    """Raw keypoint values -> keypoints in input pixels.

    raw (Tensor[..., A, K, 3]); anchors (Tensor[A, 2], cell centres in grid units, as
    :func:`~libreyolo.ops.anchors.make_anchors` gives them); strides (Tensor[A, 1]). Returns
    Tensor[..., A, K, 3] float32: x, y in pixels and the visibility probability.

    Example:
        >>> k = decode_keypoints(torch.zeros(1, 1, 3), torch.tensor([[2.5, 1.5]]), torch.tensor([[8.0]]))
        >>> k.tolist()
        [[[16.0, 8.0, 0.5]]]
        >>> decode_keypoints(torch.ones(1, 1, 3), torch.tensor([[2.5, 1.5]]), torch.tensor([[8.0]]), scale=1.0)[..., :2].tolist()
        [[[24.0, 16.0]]]
    """
    raw = raw.float()
    xy = (raw[..., :2] * scale + (anchors[:, None, :] - 0.5)) * strides[:, None, :]
    return torch.cat((xy, raw[..., 2:3].sigmoid()), -1)


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


class DensePoseLoss(YOLO9Loss):
    """``criterion(preds, batch) -> (loss, loss_items)`` (module docstring).

    preds: the network output (levels with ``4 * reg_max + nc + 3 * nkpt`` channels).
    batch: as built by :func:`libreyolo.data.pose.collate_pose` (``batch_idx``, ``cls``, ``bboxes``
    normalised cx cy w h, ``keypoints`` Tensor[N, K, 3] x, y normalised to the input, v; images in
    batch order). Returns loss = (box + pose + kobj + cls + dfl) * B and loss_items Tensor[5] (box,
    pose, kobj, cls, dfl, gains applied, detached).
    """

    def __init__(self, net: Any, *, pose: float = 12.0, kobj: float = 1.0, **kw: Any) -> None:
        super().__init__(net, **kw)
        self.nkpt = int(net.nkpt)
        self.kpt_scale = kpt_scale(net)
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
        pred = decode_keypoints(pred_raw, points[a_idx], stride_t[a_idx], scale=self.kpt_scale)
        box = t.bboxes[b_idx, a_idx].float()  # (F, 4) xyxy input pixels
        area = (box[:, 2] - box[:, 0]) * (box[:, 3] - box[:, 1])
        sim = keypoint_similarity(pred, gt_xy, area, self.sigmas.to(dev))
        loss_pose = ((1.0 - sim) * vis).sum() / vis.sum().clamp(min=1.0)
        loss_kobj = F.binary_cross_entropy_with_logits(pred_raw[..., 2], vis)
        return loss_pose, loss_kobj


def postprocess_pose(raw: list[Tensor] | tuple[Tensor, ...], *, net: nn.Module, conf: float, iou: float,
                     classes: list[int] | None, max_det: int, agnostic: bool,
                     max_candidates: int = MAX_CANDIDATES, name: str = "pose") -> list[Tensor]:
    """raw (the network output) -> per image Tensor[n, 6 + 3 * nkpt] float32: x1, y1, x2, y2
    (network-input pixels), score, class id, then per keypoint x, y (input pixels) and its
    visibility probability; rows by decreasing score, ``n <= max_det``.

    The detection channels decode as the dense detector does (best class per anchor, ``conf``
    threshold, at most ``max_candidates`` by score, DFL box decode, NMS, ``max_det``); each kept
    anchor's keypoints decode beside its box (:func:`decode_keypoints` with ``net.kpt_scale``).
    """
    nc, reg_max, nkpt, strides = int(net.nc), int(net.reg_max), int(net.nkpt), tuple(net.strides)
    scale = kpt_scale(net)
    feats = list(raw)
    nk = 3 * nkpt
    want = 4 * reg_max + nc + nk
    if len(feats) != len(strides) or any(f.dim() != 4 or f.shape[1] != want for f in feats):
        raise ConfigError(f"the {name} postprocess expects {len(strides)} levels of (B, {want}, h, w); got "
                          f"{[tuple(f.shape) for f in feats]}: pass the network's raw output list unchanged")
    device = feats[0].device
    bsz = feats[0].shape[0]
    if classes is not None and len(classes) == 0:
        return [torch.zeros((0, 6 + nk), device=device) for _ in range(bsz)]
    flat = flatten_levels(feats)  # (B, 4R + C + 3K, A)
    box_logits, cls_logits, kpts = flat.split((4 * reg_max, nc, nk), 1)
    class_ids: Tensor | None = None
    if classes is not None:
        class_ids = torch.as_tensor(list(classes), dtype=torch.long, device=device)
        cls_logits = cls_logits.index_select(1, class_ids)
    best_logit, best = cls_logits.max(1)  # (B, A)
    scores = best_logit.float().sigmoid()
    labels = class_ids[best] if class_ids is not None else best
    anchors, stride_t = make_anchors([tuple(f.shape[2:]) for f in feats], strides, device=device)
    out = []
    for b in range(bsz):
        idx = torch.nonzero(scores[b] > conf).squeeze(1)
        if idx.numel() > max_candidates:
            idx = idx[scores[b, idx].topk(max_candidates).indices]
        dist = dfl_expectation(box_logits[b, :, idx].float().unsqueeze(0), reg_max)[0]
        boxes = dist2bbox(dist, anchors[idx]) * stride_t[idx]
        s, lab = scores[b, idx], labels[b, idx]
        sel = non_max_suppression(boxes, s, lab, iou=iou, max_det=max_det, agnostic=agnostic)
        keep = idx[sel]  # anchor index of each kept detection
        k = decode_keypoints(kpts[b][:, keep].T.reshape(-1, nkpt, 3), anchors[keep], stride_t[keep], scale=scale)
        out.append(torch.cat((boxes[sel], s[sel, None], lab[sel, None].float(), k.reshape(-1, nk)), 1))
    return out
