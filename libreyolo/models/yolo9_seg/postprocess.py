"""YOLOv9-seg raw outputs -> detections with mask coefficients, and masks (eager; never captured).

:func:`postprocess` decodes the detection channels as the YOLOv9 detector does (best class per
anchor, ``conf`` threshold, at most ``max_candidates`` by score, DFL box decode, NMS, ``max_det``)
and carries each kept anchor's ``nm`` mask coefficients along. :func:`assemble_masks` turns one
image's coefficients into masks: ``sigmoid(coefficients @ prototypes)`` at the prototype
resolution (a quarter of the input), zeroed outside each box.
"""

from __future__ import annotations

import torch
from torch import Tensor, nn

from ...errors import ConfigError
from ...ops.anchors import dfl_expectation, dist2bbox, flatten_levels, make_anchors
from ...ops.nms import non_max_suppression
from .loss import crop_to_boxes

MAX_CANDIDATES = 30_000


def postprocess(raw: list[Tensor] | tuple[Tensor, ...], *, net: nn.Module, conf: float, iou: float,
                classes: list[int] | None, max_det: int, agnostic: bool,
                max_candidates: int = MAX_CANDIDATES) -> list[Tensor]:
    """raw (the network output: three levels, then prototypes) -> per image Tensor[n, 6 + nm]
    float32: x1, y1, x2, y2 (network-input pixels), score, class id, then the mask coefficients;
    rows by decreasing score, ``n <= max_det``.

    Example:
        >>> from libreyolo.models.yolo9_seg.nn import build_yolo9_seg
        >>> net = build_yolo9_seg(size="t", nc=2).eval()
        >>> with torch.no_grad():
        ...     dets = postprocess(net(torch.rand(1, 3, 64, 64)), net=net, conf=0.0, iou=0.7, classes=None,
        ...                        max_det=5, agnostic=False)
        >>> dets[0].shape
        torch.Size([5, 38])
    """
    nc, reg_max, nm, strides = int(net.nc), int(net.reg_max), int(net.nm), tuple(net.strides)
    *feats, proto = list(raw)
    want = 4 * reg_max + nc + nm
    if len(feats) != len(strides) or any(f.dim() != 4 or f.shape[1] != want for f in feats) or proto.dim() != 4:
        raise ConfigError(f"the YOLOv9-seg postprocess expects {len(strides)} levels of (B, {want}, h, w) and the "
                          f"prototypes (B, {nm}, h, w); got {[tuple(f.shape) for f in raw]}: pass the network's "
                          "raw output list unchanged")
    device = proto.device
    bsz = proto.shape[0]
    if classes is not None and len(classes) == 0:
        return [torch.zeros((0, 6 + nm), device=device) for _ in range(bsz)]
    flat = flatten_levels(feats)  # (B, 4R + C + nm, A)
    box_logits, cls_logits, coefs = flat.split((4 * reg_max, nc, nm), 1)
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
        keep = non_max_suppression(boxes, s, lab, iou=iou, max_det=max_det, agnostic=agnostic)
        out.append(torch.cat((boxes[keep], s[keep, None], lab[keep, None].float(),
                              coefs[b][:, idx[keep]].T.float()), 1))
    return out


def assemble_masks(proto: Tensor, det: Tensor, *, input_hw: tuple[int, int]) -> Tensor:
    """One image's masks at the prototype resolution: proto (Tensor[nm, mh, mw]), det
    (Tensor[n, 6 + nm] from :func:`postprocess`) -> Tensor[n, mh, mw] float32 probabilities,
    zero outside each box (boxes scaled from ``input_hw`` to the prototype grid).

    Example:
        >>> m = assemble_masks(torch.ones(2, 4, 4), torch.tensor([[0.0, 0.0, 8.0, 8.0, 0.9, 0.0, 1.0, 1.0]]),
        ...                    input_hw=(16, 16))
        >>> m.shape, round(float(m[0, 0, 0]), 3), float(m[0, 3, 3])
        (torch.Size([1, 4, 4]), 0.881, 0.0)
    """
    nm, mh, mw = proto.shape
    coef = det[:, 6:].float()
    if coef.shape[1] != nm:
        raise ConfigError(f"detections carry {coef.shape[1]} mask coefficients but the prototypes are {nm}")
    probs = (coef @ proto.float().reshape(nm, -1)).sigmoid().view(-1, mh, mw)
    h_in, w_in = input_hw
    scale = torch.tensor([mw / w_in, mh / h_in, mw / w_in, mh / h_in], device=det.device)
    return crop_to_boxes(probs, det[:, :4].float() * scale)
