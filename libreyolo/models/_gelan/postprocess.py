"""YOLOv9 raw head outputs -> detections (eager; never captured in a CUDA graph).

Decode: per anchor the best class (single label) by sigmoid score; anchors under ``conf`` are
dropped first, the survivors are capped at ``max_candidates`` by score, and only those are
box-decoded (DFL expectation, then distances around the anchor point, times the level stride)
before class-aware (or agnostic) NMS and ``max_det``.
"""

from __future__ import annotations

import torch
from torch import Tensor, nn

from ...errors import ConfigError
from ...ops.anchors import dfl_expectation, dist2bbox, flatten_levels, make_anchors
from ...ops.candidates import pack_candidates, topk_candidates
from ...ops.nms import non_max_suppression

MAX_CANDIDATES = 30_000


def postprocess(
    raw: list[Tensor] | tuple[Tensor, ...],
    *,
    net: nn.Module,
    conf: float,
    iou: float,
    classes: list[int] | None,
    max_det: int,
    agnostic: bool,
    max_candidates: int = MAX_CANDIDATES,
) -> list[Tensor]:
    """Turn the network's raw outputs into per-image detections.

    raw: one Tensor[B, 4 * reg_max + nc, H / s, W / s] per level, levels in ``net.strides``
    order (any float dtype; decoded in float32). ``net`` supplies ``nc``, ``reg_max`` and
    ``strides``. With ``classes`` given, each anchor's best class is taken among those classes
    only. Returns, per image, Tensor[n, 6] float32 on the input's device: x1, y1, x2, y2 in
    network-input pixels, score in (0, 1], class id as float; rows sorted by decreasing score,
    ``n <= max_det``.

    Example:
        >>> net = build_yolo9(size="t", nc=80).eval()  # doctest: +SKIP
        >>> dets = postprocess(net(x), net=net, conf=0.25, iou=0.7, classes=None,
        ...                    max_det=300, agnostic=False)  # doctest: +SKIP
    """
    nc, reg_max, strides = int(net.nc), int(net.reg_max), tuple(net.strides)
    feats = list(raw)
    check_raw(feats, nc=nc, reg_max=reg_max, n_levels=len(strides))
    device = feats[0].device
    if classes is not None and len(classes) == 0:
        return [torch.zeros((0, 6), device=device) for _ in range(feats[0].shape[0])]
    flat = flatten_levels(feats)  # (B, 4R + C, A)
    box_logits, cls_logits = flat.split((4 * reg_max, nc), 1)  # (B, 4R, A), (B, C, A)
    class_ids: Tensor | None = None
    if classes is not None:
        class_ids = torch.as_tensor(list(classes), dtype=torch.long, device=device)
        cls_logits = cls_logits.index_select(1, class_ids)
    best_logit, best = cls_logits.max(1)  # (B, A); sigmoid is monotonic, so take it after max
    scores = best_logit.float().sigmoid()
    labels = class_ids[best] if class_ids is not None else best
    anchors, stride_t = make_anchors([tuple(f.shape[2:]) for f in feats], strides, device=device)

    out = []
    for b in range(flat.shape[0]):
        idx = torch.nonzero(scores[b] > conf).squeeze(1)  # (N,)
        if idx.numel() > max_candidates:
            idx = idx[scores[b, idx].topk(max_candidates).indices]
        dist = dfl_expectation(box_logits[b, :, idx].float().unsqueeze(0), reg_max)[0]  # (N, 4)
        boxes = dist2bbox(dist, anchors[idx]) * stride_t[idx]  # (N, 4) input pixels
        s, lab = scores[b, idx], labels[b, idx]
        keep = non_max_suppression(boxes, s, lab, iou=iou, max_det=max_det, agnostic=agnostic)
        out.append(torch.cat((boxes[keep], s[keep, None], lab[keep, None].float()), 1))
    return out


def decode(raw: list[Tensor] | tuple[Tensor, ...], *, net: nn.Module, k: int,
           anchors: tuple[Tensor, Tensor] | None = None) -> Tensor:
    """The capturable decode: raw outputs -> Tensor[B, min(k, A), 6] float32 candidates (x1, y1,
    x2, y2 in network-input pixels, score, class id) by decreasing score.

    Same per-anchor math as :func:`postprocess` (best class by logit, sigmoid, DFL expectation,
    distances around the anchor times the stride), on a fixed number of anchors: no threshold,
    no host sync. ``anchors``: precomputed ``make_anchors`` output for these feature shapes.
    """
    nc, reg_max, strides = int(net.nc), int(net.reg_max), tuple(net.strides)
    feats = list(raw)
    check_raw(feats, nc=nc, reg_max=reg_max, n_levels=len(strides))
    flat = flatten_levels(feats)  # (B, 4R + C, A)
    box_logits, cls_logits = flat.split((4 * reg_max, nc), 1)  # (B, 4R, A), (B, C, A)
    best_logit, best = cls_logits.max(1)  # (B, A)
    top, idx = topk_candidates(best_logit.float().sigmoid(), k)  # (B, k)
    sel = box_logits.gather(2, idx[:, None, :].expand(-1, 4 * reg_max, -1)).float()  # (B, 4R, k)
    dist = dfl_expectation(sel, reg_max)  # (B, k, 4)
    if anchors is None:
        anchors = make_anchors([tuple(f.shape[2:]) for f in feats], strides, device=flat.device)
    points, stride_t = anchors
    boxes = dist2bbox(dist, points[idx]) * stride_t[idx]  # (B, k, 4)
    return pack_candidates(boxes, top, best.gather(1, idx))


def check_raw(feats: list[Tensor], *, nc: int, reg_max: int, n_levels: int, name: str = "YOLOv9",
              hint: str = "pass the network's raw output list unchanged") -> None:
    """One-line errors for a raw head output that does not fit (level count, channels)."""
    if len(feats) != n_levels:
        raise ConfigError(f"the {name} postprocess expects {n_levels} output levels, got {len(feats)}: {hint}")
    want = 4 * reg_max + nc
    for i, f in enumerate(feats):
        if f.dim() != 4 or f.shape[1] != want:
            raise ConfigError(
                f"{name} output level {i} has shape {tuple(f.shape)}; expected "
                f"(B, {want}, h, w) = 4 * reg_max ({reg_max}) + nc ({nc}) channels. "
                "Was the network built with a different number of classes?"
            )

