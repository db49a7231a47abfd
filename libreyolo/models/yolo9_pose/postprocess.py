"""YOLOv9-pose raw outputs -> detections with their keypoints (eager; never captured).

:func:`postprocess` decodes the detection channels as the YOLOv9 detector does (best class per
anchor, ``conf`` threshold, at most ``max_candidates`` by score, DFL box decode, NMS, ``max_det``)
and decodes each kept anchor's keypoints (:func:`~.nn.decode_keypoints`) beside its box.
"""

from __future__ import annotations

import torch
from torch import Tensor, nn

from ...errors import ConfigError
from ...ops.anchors import dfl_expectation, dist2bbox, flatten_levels, make_anchors
from ...ops.nms import non_max_suppression
from .nn import decode_keypoints

MAX_CANDIDATES = 30_000


def postprocess(raw: list[Tensor] | tuple[Tensor, ...], *, net: nn.Module, conf: float, iou: float,
                classes: list[int] | None, max_det: int, agnostic: bool,
                max_candidates: int = MAX_CANDIDATES) -> list[Tensor]:
    """raw (the network output: three levels) -> per image Tensor[n, 6 + 3 * nkpt] float32: x1, y1,
    x2, y2 (network-input pixels), score, class id, then per keypoint x, y (input pixels) and its
    visibility probability; rows by decreasing score, ``n <= max_det``.

    Example:
        >>> from libreyolo.models.yolo9_pose.nn import build_yolo9_pose
        >>> net = build_yolo9_pose(size="t", nc=2, nkpt=4).eval()
        >>> with torch.no_grad():
        ...     dets = postprocess(net(torch.rand(1, 3, 64, 64)), net=net, conf=0.0, iou=0.7, classes=None,
        ...                        max_det=5, agnostic=False)
        >>> dets[0].shape
        torch.Size([5, 18])
    """
    nc, reg_max, nkpt, strides = int(net.nc), int(net.reg_max), int(net.nkpt), tuple(net.strides)
    feats = list(raw)
    nk = 3 * nkpt
    want = 4 * reg_max + nc + nk
    if len(feats) != len(strides) or any(f.dim() != 4 or f.shape[1] != want for f in feats):
        raise ConfigError(f"the YOLOv9-pose postprocess expects {len(strides)} levels of (B, {want}, h, w); got "
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
        k = decode_keypoints(kpts[b][:, keep].T.reshape(-1, nkpt, 3), anchors[keep], stride_t[keep])  # (n, K, 3)
        out.append(torch.cat((boxes[sel], s[sel, None], lab[sel, None].float(), k.reshape(-1, nk)), 1))
    return out
