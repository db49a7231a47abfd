"""YOLOv9 end-to-end raw one-to-one head outputs -> detections, without NMS.

:func:`decode` is the whole selection, a pure function of the head output with a fixed ``k``:
sigmoid class scores; the ``k`` anchors of highest best-class score; among them the ``k`` highest
(anchor, class) pairs (one anchor may give two classes, as the reference's selection allows);
those anchors' boxes decoded (DFL expectation, distances around the anchor point, times the
stride). It is what the prediction CUDA graph holds. :func:`postprocess` runs it with
``k = max_det`` and then only drops the rows at or under ``conf`` (the one data-dependent step,
which leaves a variable count); NMS never runs, ``iou`` and ``agnostic`` are ignored.
"""

from __future__ import annotations

import torch
from torch import Tensor, nn

from ...ops.anchors import dfl_expectation, dist2bbox, flatten_levels, make_anchors
from ...ops.candidates import pack_candidates
from .._gelan.postprocess import check_raw


def decode(raw: list[Tensor] | tuple[Tensor, ...], *, net: nn.Module, k: int,
           anchors: tuple[Tensor, Tensor] | None = None, classes: list[int] | None = None) -> Tensor:
    """raw (one Tensor[B, 4 * reg_max + nc, h, w] per level of ``net.strides``) ->
    Tensor[B, min(k, A), 6] float32 (x1, y1, x2, y2 in network-input pixels, score, class id), by
    decreasing score. No threshold, no host sync, fixed shape.

    ``anchors``: precomputed ``make_anchors`` output for these feature shapes. ``classes``: score
    only those classes (ids keep their meaning).

    Example:
        >>> import torch
        >>> from libreyolo.models.yolo9_e2e.nn import build_yolo9_e2e
        >>> net = build_yolo9_e2e(size="t", nc=3).eval()
        >>> decode(net(torch.rand(2, 3, 64, 64)), net=net, k=10).shape
        torch.Size([2, 10, 6])
    """
    nc, reg_max, strides = int(net.nc), int(net.reg_max), tuple(net.strides)
    feats = list(raw)
    _check_raw(feats, nc=nc, reg_max=reg_max, n_levels=len(strides))
    flat = flatten_levels(feats)  # (B, 4R + C, A)
    box_logits, cls_logits = flat.split((4 * reg_max, nc), 1)  # (B, 4R, A), (B, C, A)
    class_ids: Tensor | None = None
    if classes is not None:
        class_ids = torch.as_tensor(list(classes), dtype=torch.long, device=flat.device)
        cls_logits = cls_logits.index_select(1, class_ids)
    b, c, a = cls_logits.shape
    kk = min(int(k), a)
    scores = cls_logits.float().sigmoid()  # (B, C, A); sigmoid first, so ties rank as the reference's
    anchor_idx = scores.amax(1).topk(kk, dim=1).indices  # (B, k) anchors by best class score
    sub = scores.gather(2, anchor_idx[:, None, :].expand(-1, c, -1))  # (B, C, k)
    top, pair = sub.transpose(1, 2).reshape(b, kk * c).topk(kk, dim=1)  # (B, k) best (anchor, class) pairs
    idx = anchor_idx.gather(1, torch.div(pair, c, rounding_mode="floor"))  # (B, k) anchor of each pair
    labels = pair.remainder(c)
    if class_ids is not None:
        labels = class_ids[labels]
    sel = box_logits.gather(2, idx[:, None, :].expand(-1, 4 * reg_max, -1)).float()  # (B, 4R, k)
    dist = dfl_expectation(sel, reg_max)  # (B, k, 4)
    if anchors is None:
        anchors = make_anchors([tuple(f.shape[2:]) for f in feats], strides, device=flat.device)
    points, stride_t = anchors
    boxes = dist2bbox(dist, points[idx]) * stride_t[idx]  # (B, k, 4)
    return pack_candidates(boxes, top, labels)


def postprocess(
    raw: list[Tensor] | tuple[Tensor, ...],
    *,
    net: nn.Module,
    conf: float,
    iou: float,
    classes: list[int] | None,
    max_det: int,
    agnostic: bool,
) -> list[Tensor]:
    """Per image Tensor[n, 6] float32 (x1, y1, x2, y2 in network-input pixels, score, class id),
    by decreasing score, ``n <= max_det``: :func:`decode` with ``k = max_det``, then the rows with
    score > ``conf``. ``iou`` and ``agnostic`` are accepted for the common signature and unused
    (the one-to-one head needs no NMS).

    Example:
        >>> import torch
        >>> from libreyolo.models.yolo9_e2e.nn import build_yolo9_e2e
        >>> net = build_yolo9_e2e(size="t", nc=3).eval()
        >>> dets = postprocess(net(torch.rand(1, 3, 64, 64)), net=net, conf=0.0, iou=0.7, classes=None,
        ...                    max_det=5, agnostic=False)
        >>> dets[0].shape
        torch.Size([5, 6])
    """
    feats = list(raw)
    if classes is not None and len(classes) == 0:
        return [torch.zeros((0, 6), device=feats[0].device) for _ in range(feats[0].shape[0])]
    cands = decode(feats, net=net, k=max_det, classes=classes)  # (B, k, 6)
    keep = cands[..., 4] > conf  # (B, k): the only data-dependent step
    return [cands[i][keep[i]] for i in range(cands.shape[0])]


def _check_raw(feats: list[Tensor], *, nc: int, reg_max: int, n_levels: int) -> None:
    check_raw(feats, nc=nc, reg_max=reg_max, n_levels=n_levels, name="yolo9_e2e",
              hint="pass the eval-mode network output unchanged (train mode adds the one-to-many levels)")
