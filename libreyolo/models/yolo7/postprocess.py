"""YOLOv7 raw head outputs -> detections (eager; never captured in a CUDA graph).

Decode (the reference's, per anchor of every cell): ``xy = (sigmoid * 2 - 0.5 + grid) *
stride``, ``wh = (sigmoid * 2) ** 2 * anchor`` (anchors in pixels). Score = objectness x class
probability of the best class (single label); with one class the score is the objectness alone
(the reference trains no class logit when ``nc == 1``). Anchors under ``conf`` are dropped, the
survivors capped at ``max_candidates`` by score, then class-aware (or agnostic) NMS and
``max_det``.
"""

from __future__ import annotations

import torch
from torch import Tensor, nn

from ...errors import ConfigError
from ...ops.boxes import xywh_to_xyxy
from ...ops.nms import non_max_suppression

MAX_CANDIDATES = 30_000


def level_view(raw: Tensor, na: int) -> Tensor:
    """Tensor[B, na * no, h, w] -> Tensor[B, na, h, w, no] (a permuted view, no copy)."""
    b, c, h, w = raw.shape
    return raw.view(b, na, c // na, h, w).permute(0, 1, 3, 4, 2)


def decode_xywh(txywh: Tensor, *, gxy: Tensor, anchor_wh: Tensor, stride: float) -> Tensor:
    """Box logits -> cx, cy, w, h in input pixels.

    txywh (Tensor[..., 4]) logits; gxy (Tensor[..., 2]) integer cell x, y (broadcastable);
    anchor_wh (Tensor[..., 2]) anchor size in pixels (broadcastable). Returns Tensor[..., 4].
    """
    s = txywh.sigmoid() * 2
    xy = (s[..., :2] - 0.5 + gxy) * stride
    wh = s[..., 2:4].square() * anchor_wh
    return torch.cat((xy, wh), -1)


def decode_levels(raw: list[Tensor], *, anchors: Tensor, strides: tuple[int, ...]) -> Tensor:
    """Decode every level and flatten: -> Tensor[B, A, 5 + nc] float32 with boxes as cx, cy,
    w, h pixels, objectness and class *probabilities*; A = sum(na * h_i * w_i), ordered by
    level, anchor, row, column. anchors (Tensor[nl, na, 2]) pixels."""
    out = []
    na = anchors.shape[1]
    for i, r in enumerate(raw):
        p = level_view(r.float(), na)  # (B, na, h, w, no)
        _, _, h, w, no = p.shape
        gy, gx = torch.meshgrid(torch.arange(h, device=r.device), torch.arange(w, device=r.device),
                                indexing="ij")
        gxy = torch.stack((gx, gy), -1).float()  # (h, w, 2)
        anc = anchors[i].float().view(1, na, 1, 1, 2)
        box = decode_xywh(p[..., :4], gxy=gxy, anchor_wh=anc, stride=float(strides[i]))
        out.append(torch.cat((box, p[..., 4:].sigmoid()), -1).reshape(p.shape[0], -1, no))
    return torch.cat(out, 1)


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

    raw: one Tensor[B, na * (5 + nc), H / s, W / s] per level, levels in ``net.strides`` order
    (any float dtype; decoded in float32). ``net`` supplies ``nc``, ``strides`` and
    ``head.anchors`` (Tensor[nl, na, 2] pixels). With ``classes`` given, each anchor's best
    class is taken among those classes only. Returns, per image, Tensor[n, 6] float32 on the
    input's device: x1, y1, x2, y2 in network-input pixels, score in (0, 1], class id as float;
    rows sorted by decreasing score, ``n <= max_det``.

    Example:
        >>> net = build_yolo7(size="tiny", nc=80).eval()  # doctest: +SKIP
        >>> dets = postprocess(net(x), net=net, conf=0.25, iou=0.65, classes=None,
        ...                    max_det=300, agnostic=False)  # doctest: +SKIP
    """
    nc, strides = int(net.nc), tuple(int(s) for s in net.strides)
    anchors = net.head.anchors
    feats = list(raw)
    _check_raw(feats, nc=nc, na=int(anchors.shape[1]), n_levels=len(strides))
    device = feats[0].device
    if classes is not None and len(classes) == 0:
        return [torch.zeros((0, 6), device=device) for _ in range(feats[0].shape[0])]
    pred = decode_levels(feats, anchors=anchors.to(device), strides=strides)  # (B, A, 5 + nc)
    obj, cls_prob = pred[..., 4], pred[..., 5:]
    class_ids: Tensor | None = None
    if classes is not None:
        class_ids = torch.as_tensor(list(classes), dtype=torch.long, device=device)
        cls_prob = cls_prob.index_select(2, class_ids)
    best_prob, best = cls_prob.max(2)  # (B, A)
    scores = obj if nc == 1 else obj * best_prob
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


def _check_raw(feats: list[Tensor], *, nc: int, na: int, n_levels: int) -> None:
    if len(feats) != n_levels:
        raise ConfigError(
            f"yolo7 postprocess expects {n_levels} output levels, got {len(feats)}: pass the "
            "network's raw output list unchanged"
        )
    want = na * (5 + nc)
    for i, f in enumerate(feats):
        if f.dim() != 4 or f.shape[1] != want:
            raise ConfigError(
                f"yolo7 output level {i} has shape {tuple(f.shape)}; expected "
                f"(B, {want}, h, w) = {na} anchors x (5 + nc ({nc})) channels. "
                "Was the network built with a different number of classes?"
            )
