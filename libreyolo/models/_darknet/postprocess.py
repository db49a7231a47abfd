"""Anchor-based decode and postprocess of the Darknet lineage (YOLOv2 / v3 / v4).

Decode, per anchor ``a`` of cell ``(gx, gy)`` on a level of stride ``s`` (the Darknet ``[yolo]``
layer): centre ``(sigmoid(t_xy) * k - (k - 1) / 2 + (gx, gy)) * s`` with ``k`` the level's
``scale_xy`` (1 for YOLOv3; YOLOv4's grid sensitivity 1.2 / 1.1 / 1.05), size
``exp(t_wh) * anchor_a`` (anchors in input pixels; ``t_wh`` clamped at 20 so garbage logits give
no infinite box); objectness ``sigmoid(t_obj)``; class probabilities ``sigmoid`` (v3, v4) or
``softmax`` (v2) of the class logits; score = objectness x best class probability.

:func:`decode` is the captured part of prediction (``Family.DECODE_TOPK``): a pure, shape-static
function of the head output giving the ``k`` best candidates per image. :func:`postprocess` is
the eager path over every anchor (validation, ``cuda_graph=False`` callers of
``model.postprocess``): threshold at ``conf``, at most ``max_candidates`` by score, NMS, ``max_det``.
"""

from __future__ import annotations

import torch
from torch import Tensor, nn

from ...errors import ConfigError
from ...ops.boxes import xywh_to_xyxy
from ...ops.candidates import pack_candidates, topk_candidates
from ...ops.nms import non_max_suppression

MAX_CANDIDATES = 30_000
MAX_LOG_SIZE = 20.0


def level_view(raw: Tensor, na: int) -> Tensor:
    """Tensor[B, na * no, h, w] -> Tensor[B, na, h, w, no] (a permuted view, no copy)."""
    b, c, h, w = raw.shape
    return raw.view(b, na, c // na, h, w).permute(0, 1, 3, 4, 2)


def make_grid(feat_shapes: list[tuple[int, int]], strides: tuple[int, ...] | list[int], *,
              device: torch.device | str = "cpu") -> list[Tensor]:
    """Per level the integer cell coordinates Tensor[h, w, 2] float32 (x, y)."""
    out = []
    for h, w in feat_shapes:
        gy, gx = torch.meshgrid(torch.arange(h, device=device, dtype=torch.float32),
                                torch.arange(w, device=device, dtype=torch.float32), indexing="ij")
        out.append(torch.stack((gx, gy), -1))
    return out


def decode_xywh(t: Tensor, *, gxy: Tensor, anchor_wh: Tensor, stride: float, scale_xy: float = 1.0) -> Tensor:
    """Box logits -> cx, cy, w, h in input pixels.

    t (Tensor[..., 4]) logits tx, ty, tw, th; gxy (Tensor[..., 2]) integer cell x, y and
    anchor_wh (Tensor[..., 2]) anchor size in pixels, both broadcastable. Returns Tensor[..., 4].
    """
    xy = t[..., :2].sigmoid()
    if scale_xy != 1.0:
        xy = xy * scale_xy - 0.5 * (scale_xy - 1.0)
    wh = t[..., 2:4].clamp(max=MAX_LOG_SIZE).exp() * anchor_wh
    return torch.cat(((xy + gxy) * stride, wh), -1)


def class_probs(logits: Tensor, cls_act: str) -> Tensor:
    """Class logits (Tensor[..., nc]) -> probabilities: sigmoid, or softmax over the last axis."""
    return logits.softmax(-1) if cls_act == "softmax" else logits.sigmoid()


def decode_levels(raw: list[Tensor], *, head: nn.Module, grids: list[Tensor] | None = None) -> Tensor:
    """Decode every level and flatten: -> Tensor[B, A, 5 + nc] float32 (cx, cy, w, h input pixels,
    objectness probability, class probabilities), A = sum(na * h_i * w_i), ordered by level,
    anchor, row, column. ``head`` supplies ``anchors`` (Tensor[nl, na, 2] pixels), ``strides``,
    ``scale_xy`` and ``cls_act``; ``grids`` as from :func:`make_grid` (built when None)."""
    anchors = head.anchors
    na = int(anchors.shape[1])
    if grids is None:
        grids = make_grid([tuple(r.shape[2:]) for r in raw], head.strides, device=raw[0].device)
    out = []
    for i, r in enumerate(raw):
        p = level_view(r.float(), na)  # (B, na, h, w, no)
        anc = anchors[i].to(p.device, torch.float32).view(1, na, 1, 1, 2)
        box = decode_xywh(p[..., :4], gxy=grids[i], anchor_wh=anc, stride=float(head.strides[i]),
                          scale_xy=float(head.scale_xy[i]))
        obj = p[..., 4:5].sigmoid()
        out.append(torch.cat((box, obj, class_probs(p[..., 5:], head.cls_act)), -1).reshape(p.shape[0], -1, p.shape[-1]))
    return torch.cat(out, 1)


def decode(raw: list[Tensor] | tuple[Tensor, ...], *, net: nn.Module, k: int,
           grids: list[Tensor] | None = None) -> Tensor:
    """The capturable decode: raw outputs -> Tensor[B, min(k, A), 6] float32 candidates (x1, y1,
    x2, y2 in network-input pixels, score = objectness x best class probability, class id) by
    decreasing score. Same per-anchor math as :func:`postprocess`, on a fixed number of anchors."""
    feats = list(raw)
    _check_raw(feats, net=net)
    pred = decode_levels(feats, head=net.head, grids=grids)  # (B, A, 5 + nc)
    best_prob, best = pred[..., 5:].max(2)  # (B, A)
    top, idx = topk_candidates(pred[..., 4] * best_prob, k)  # (B, k)
    boxes = xywh_to_xyxy(pred[..., :4].gather(1, idx[..., None].expand(-1, -1, 4)))  # (B, k, 4)
    return pack_candidates(boxes, top, best.gather(1, idx))


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

    raw: one Tensor[B, na * (5 + nc), H / s, W / s] per level in ``net.strides`` order (any float
    dtype; decoded in float32); ``net.head`` supplies anchors, strides, scale_xy and cls_act.
    With ``classes`` given, each anchor's best class is taken among those classes only. Returns,
    per image, Tensor[n, 6] float32 on the input's device: x1, y1, x2, y2 in network-input
    pixels, score in (0, 1], class id as float; by decreasing score, ``n <= max_det``.
    """
    feats = list(raw)
    _check_raw(feats, net=net)
    device = feats[0].device
    if classes is not None and len(classes) == 0:
        return [torch.zeros((0, 6), device=device) for _ in range(feats[0].shape[0])]
    pred = decode_levels(feats, head=net.head)  # (B, A, 5 + nc)
    cls_prob = pred[..., 5:]
    class_ids: Tensor | None = None
    if classes is not None:
        class_ids = torch.as_tensor(list(classes), dtype=torch.long, device=device)
        cls_prob = cls_prob.index_select(2, class_ids)
    best_prob, best = cls_prob.max(2)  # (B, A)
    scores = pred[..., 4] * best_prob
    labels = class_ids[best] if class_ids is not None else best
    out = []
    for b in range(pred.shape[0]):
        idx = torch.nonzero(scores[b] > conf).squeeze(1)  # (N,)
        if idx.numel() > max_candidates:
            idx = idx[scores[b, idx].topk(max_candidates).indices]
        boxes = xywh_to_xyxy(pred[b, idx, :4])  # (N, 4) input pixels
        s, lab = scores[b, idx], labels[b, idx]
        keep = non_max_suppression(boxes, s, lab, iou=iou, max_det=max_det, agnostic=agnostic)
        out.append(torch.cat((boxes[keep], s[keep, None], lab[keep, None].float()), 1))
    return out


def _check_raw(feats: list[Tensor], *, net: nn.Module) -> None:
    head = net.head
    name = getattr(net, "family_name", "darknet")
    if len(feats) != len(head.strides):
        raise ConfigError(
            f"{name} postprocess expects {len(head.strides)} output levels, got {len(feats)}: pass the "
            "network's raw output list unchanged"
        )
    want = head.na * (5 + head.nc)
    for i, f in enumerate(feats):
        if f.dim() != 4 or f.shape[1] != want:
            raise ConfigError(
                f"{name} output level {i} has shape {tuple(f.shape)}; expected (B, {want}, h, w) = "
                f"{head.na} anchors x (5 + nc ({head.nc})) channels. Was the network built with a "
                "different number of classes?"
            )
