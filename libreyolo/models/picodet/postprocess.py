"""PicoDet raw head outputs -> detections.

Decode as the reference (GFL head with ``cell_offset: 0.5``): anchor points at the cell centres
``((col + 0.5) * s, (row + 0.5) * s)``; per side the expected distance of the softmax over the
bins 0..REG_MAX, times the stride, around the point; sigmoid class scores. Candidates are
(anchor, class) pairs whose score exceeds ``conf`` (multi-label), capped at
``max_candidates`` by score; only those are box-decoded before class-aware (or agnostic) NMS
and ``max_det``. :func:`postprocess` is eager; :func:`decode` is its fixed-size, capturable
front half (the top ``k`` pairs) for the prediction graph.
"""

from __future__ import annotations

import torch
from torch import Tensor, nn

from ...errors import ConfigError
from ...ops.anchors import dfl_expectation, dist2bbox, flatten_levels, make_anchors
from ...ops.candidates import pack_candidates, topk_candidates
from ...ops.nms import non_max_suppression

MAX_CANDIDATES = 30_000


def anchor_grid(feat_shapes: list[tuple[int, int]], strides: tuple[int, ...], *,
                device: torch.device | str = "cpu") -> tuple[Tensor, Tensor]:
    """Cell centres of every level: points (Tensor[A, 2]) in grid units of their level and
    strides (Tensor[A, 1]), float32 (multiply for pixels), levels in stride order."""
    return make_anchors(feat_shapes, strides, offset=0.5, device=device)


def decode_boxes(reg: Tensor, points: Tensor, strides: Tensor, *, bins: int) -> Tensor:
    """Distance-distribution logits to xyxy boxes in input pixels.

    reg (Tensor[B, 4 * bins, N]) logits; points (Tensor[N, 2] or Tensor[B, N, 2]) grid units;
    strides (Tensor[N, 1] or Tensor[B, N, 1]) -> (Tensor[B, N, 4]) float32 x1, y1, x2, y2.
    """
    dist = dfl_expectation(reg.float(), bins)  # (B, N, 4) grid units
    return dist2bbox(dist, points) * strides


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

    raw: one Tensor[B, nc + 4 * bins, h, w] per level, levels in ``net.strides`` order (any
    float dtype; decoded in float32). ``net`` supplies ``nc``, ``strides`` and ``reg_max`` (the
    bins per side). With ``classes`` given, only those classes are candidates. Returns, per
    image, Tensor[n, 6] float32 on the input's device: x1, y1, x2, y2 in network-input pixels,
    score in (0, 1], class id as float; rows by decreasing score, ``n <= max_det``.

    Example:
        >>> net = build_picodet(size="s", nc=80).eval()  # doctest: +SKIP
        >>> dets = postprocess(net(x), net=net, conf=0.25, iou=0.6, classes=None,
        ...                    max_det=100, agnostic=False)  # doctest: +SKIP
    """
    nc, bins, strides = int(net.nc), int(net.reg_max), tuple(int(s) for s in net.strides)
    feats = list(raw)
    _check_raw(feats, nc=nc, bins=bins, n_levels=len(strides))
    device = feats[0].device
    bsz = feats[0].shape[0]
    if classes is not None and len(classes) == 0:
        return [torch.zeros((0, 6), device=device) for _ in range(bsz)]
    flat = flatten_levels(feats)  # (B, C + 4R, A)
    cls_logits, reg = flat.split((nc, 4 * bins), 1)
    class_ids = torch.arange(nc, device=device)
    if classes is not None:
        class_ids = torch.as_tensor(list(classes), dtype=torch.long, device=device)
        if bool(((class_ids < 0) | (class_ids >= nc)).any()):
            raise ConfigError(f"classes {list(classes)} must lie in 0..{nc - 1}")
        cls_logits = cls_logits.index_select(1, class_ids)
    scores = cls_logits.float().sigmoid().transpose(1, 2)  # (B, A, C')
    points, stride_t = anchor_grid([tuple(f.shape[2:]) for f in feats], strides, device=device)

    out = []
    for b in range(bsz):
        cand = torch.nonzero(scores[b] > conf)  # (N, 2): anchor, class column
        s = scores[b, cand[:, 0], cand[:, 1]]
        if s.numel() > max_candidates:
            top = s.topk(max_candidates).indices
            cand, s = cand[top], s[top]
        a_idx, lab = cand[:, 0], class_ids[cand[:, 1]]
        boxes = decode_boxes(reg[b:b + 1, :, a_idx], points[a_idx], stride_t[a_idx], bins=bins)[0]  # (N, 4)
        keep = non_max_suppression(boxes, s, lab, iou=iou, max_det=max_det, agnostic=agnostic)
        out.append(torch.cat((boxes[keep], s[keep, None], lab[keep, None].float()), 1))
    return out


def decode(raw: list[Tensor] | tuple[Tensor, ...], *, net: nn.Module, k: int,
           grid: tuple[Tensor, Tensor] | None = None) -> Tensor:
    """The capturable decode: raw outputs -> Tensor[B, min(k, A * nc), 6] float32 candidates
    (x1, y1, x2, y2 in network-input pixels, score, class id) by decreasing score: the top
    (anchor, class) pairs, so an anchor may appear once per class as in :func:`postprocess`.
    ``grid``: :func:`anchor_grid` of these feature shapes (built here when not given)."""
    nc, bins, strides = int(net.nc), int(net.reg_max), tuple(int(s) for s in net.strides)
    feats = list(raw)
    _check_raw(feats, nc=nc, bins=bins, n_levels=len(strides))
    flat = flatten_levels(feats)  # (B, C + 4R, A)
    cls_logits, reg = flat.split((nc, 4 * bins), 1)
    scores = cls_logits.float().sigmoid().transpose(1, 2)  # (B, A, C)
    top, idx = topk_candidates(scores.flatten(1), k)  # (B, k) over A * C
    a_idx, lab = idx // nc, idx % nc
    if grid is None:
        grid = anchor_grid([tuple(f.shape[2:]) for f in feats], strides, device=flat.device)
    points, stride_t = grid
    r = reg.gather(2, a_idx[:, None, :].expand(-1, 4 * bins, -1))  # (B, 4R, k)
    boxes = decode_boxes(r, points[a_idx], stride_t[a_idx], bins=bins)
    return pack_candidates(boxes, top, lab)


def _check_raw(feats: list[Tensor], *, nc: int, bins: int, n_levels: int) -> None:
    if len(feats) != n_levels:
        raise ConfigError(
            f"picodet postprocess expects {n_levels} output levels, got {len(feats)}: pass the "
            "network's raw output list unchanged"
        )
    for i, f in enumerate(feats):
        if f.dim() != 4 or f.shape[1] != nc + 4 * bins:
            raise ConfigError(
                f"picodet output level {i} has shape {tuple(f.shape)}; expected (B, {nc + 4 * bins}, h, w) "
                f"= nc ({nc}) class logits + 4 x {bins} distance bins. Was the network built with a "
                "different number of classes?"
            )
