"""RTMDet raw head outputs -> detections (eager; never captured in a CUDA graph).

Decode as the reference does: grid points at the cell corners (``(i * s, j * s)``, offset 0),
box distances ``raw * s`` (or ``exp(raw) * s`` for sizes with ``exp_on_reg``) around them,
sigmoid class scores. Candidates are (anchor, class) pairs whose score exceeds ``conf``
(multi-label, as the reference's ``filter_scores_and_topk``), capped at ``max_candidates`` by
score; only those are box-decoded before class-aware (or agnostic) NMS and ``max_det``.
"""

from __future__ import annotations

import torch
from torch import Tensor, nn

from ...errors import ConfigError
from ...ops.anchors import flatten_levels
from ...ops.candidates import pack_candidates, topk_candidates
from ...ops.nms import non_max_suppression

MAX_CANDIDATES = 30_000


def grid_points(feat_shapes: list[tuple[int, int]], strides: tuple[int, ...], *,
                device: torch.device | str = "cpu") -> tuple[Tensor, Tensor]:
    """Grid points of every level at the cell corners, in input pixels.

    Returns points (Tensor[A, 2], float32) x, y = (col * s, row * s) and strides
    (Tensor[A], float32), levels flattened row-major and concatenated in stride order.
    """
    pts, st = [], []
    for (h, w), s in zip(feat_shapes, strides, strict=True):
        ys, xs = torch.meshgrid(torch.arange(h, device=device, dtype=torch.float32) * s,
                                torch.arange(w, device=device, dtype=torch.float32) * s, indexing="ij")
        pts.append(torch.stack((xs, ys), -1).view(-1, 2))
        st.append(torch.full((h * w,), float(s), device=device))
    return torch.cat(pts), torch.cat(st)


def decode_boxes(reg: Tensor, points: Tensor, strides: Tensor, *, exp_on_reg: bool) -> Tensor:
    """Distances to xyxy boxes in input pixels.

    reg (Tensor[..., A, 4]) raw l, t, r, b in stride units; points (Tensor[A, 2]) pixels;
    strides (Tensor[A]) -> (Tensor[..., A, 4]) x1, y1, x2, y2 (float32). Points and strides
    may carry the same leading dimensions as ``reg`` (gathered per image).
    """
    dist = reg.float()
    if exp_on_reg:
        dist = dist.exp()
    dist = dist * strides[..., None]
    return torch.cat((points - dist[..., :2], points + dist[..., 2:]), -1)


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

    raw: one Tensor[B, 4 + nc, H / s, W / s] per level, levels in ``net.strides`` order (any float
    dtype; decoded in float32). ``net`` supplies ``nc``, ``strides`` and ``exp_on_reg``. With
    ``classes`` given, only those classes are candidates. Returns, per image, Tensor[n, 6] float32
    on the input's device: x1, y1, x2, y2 in network-input pixels, score in (0, 1], class id as
    float; rows sorted by decreasing score, ``n <= max_det``. An anchor may appear once per class.

    Example:
        >>> net = build_rtmdet(size="t", nc=80).eval()  # doctest: +SKIP
        >>> dets = postprocess(net(x), net=net, conf=0.25, iou=0.7, classes=None,
        ...                    max_det=300, agnostic=False)  # doctest: +SKIP
    """
    nc, strides = int(net.nc), tuple(int(s) for s in net.strides)
    feats = list(raw)
    _check_raw(feats, nc=nc, n_levels=len(strides))
    kept = select(feats, net=net, conf=conf, iou=iou, classes=classes, max_det=max_det, agnostic=agnostic,
                  max_candidates=max_candidates)
    return [det for det, _ in kept]


def select(
    feats: list[Tensor],
    *,
    net: nn.Module,
    conf: float,
    iou: float,
    classes: list[int] | None,
    max_det: int,
    agnostic: bool,
    max_candidates: int = MAX_CANDIDATES,
    clip_hw: tuple[int, int] | None = None,
) -> list[tuple[Tensor, Tensor]]:
    """:func:`postprocess` that also says where each detection came from.

    feats: one Tensor[B, C, H / s, W / s] per level whose first ``4 + nc`` channels are the box
    regression and class logits (further channels are ignored). ``clip_hw`` (height, width):
    clip the decoded boxes to that image before NMS, as mmdetection's decoder does with
    ``max_shape`` (None: unclipped, the ``rtmdet`` default). Returns per image (detections
    Tensor[n, 6] as :func:`postprocess`, anchor index Tensor[n] int64 into the levels flattened
    row-major and concatenated in stride order, the order of :func:`grid_points`).
    """
    nc, strides = int(net.nc), tuple(int(s) for s in net.strides)
    device = feats[0].device
    bsz = feats[0].shape[0]
    if classes is not None and len(classes) == 0:
        return [(torch.zeros((0, 6), device=device), torch.zeros((0,), dtype=torch.long, device=device))
                for _ in range(bsz)]
    flat = flatten_levels([f[:, :4 + nc] for f in feats])  # (B, 4 + C, A)
    reg, cls_logits = flat.split((4, nc), 1)  # (B, 4, A), (B, C, A)
    class_ids = torch.arange(nc, device=device)
    if classes is not None:
        class_ids = torch.as_tensor(list(classes), dtype=torch.long, device=device)
        if bool(((class_ids < 0) | (class_ids >= nc)).any()):
            raise ConfigError(f"classes {list(classes)} must lie in 0..{nc - 1}")
        cls_logits = cls_logits.index_select(1, class_ids)
    scores = cls_logits.float().sigmoid().transpose(1, 2)  # (B, A, C')
    points, stride_t = grid_points([tuple(f.shape[2:]) for f in feats], strides, device=device)
    exp_on_reg = bool(getattr(net, "exp_on_reg", False))

    out = []
    for b in range(bsz):
        cand = torch.nonzero(scores[b] > conf)  # (N, 2): anchor, class column
        s = scores[b, cand[:, 0], cand[:, 1]]  # (N,)
        if s.numel() > max_candidates:
            top = s.topk(max_candidates).indices
            cand, s = cand[top], s[top]
        a_idx, lab = cand[:, 0], class_ids[cand[:, 1]]
        boxes = decode_boxes(reg[b, :, a_idx].transpose(0, 1), points[a_idx], stride_t[a_idx],
                             exp_on_reg=exp_on_reg)  # (N, 4)
        if clip_hw is not None:
            h, w = clip_hw
            boxes = torch.stack((boxes[:, 0].clamp(0, w), boxes[:, 1].clamp(0, h), boxes[:, 2].clamp(0, w),
                                 boxes[:, 3].clamp(0, h)), 1)
        keep = non_max_suppression(boxes, s, lab, iou=iou, max_det=max_det, agnostic=agnostic)
        out.append((torch.cat((boxes[keep], s[keep, None], lab[keep, None].float()), 1), a_idx[keep]))
    return out


def decode(raw: list[Tensor] | tuple[Tensor, ...], *, net: nn.Module, k: int,
           grid: tuple[Tensor, Tensor] | None = None) -> Tensor:
    """The capturable decode: raw outputs -> Tensor[B, min(k, A * nc), 6] float32 candidates
    (x1, y1, x2, y2 in network-input pixels, score, class id) by decreasing score: the top
    (anchor, class) pairs, so an anchor may appear once per class as in :func:`postprocess`."""
    nc, strides = int(net.nc), tuple(int(s) for s in net.strides)
    feats = list(raw)
    _check_raw(feats, nc=nc, n_levels=len(strides))
    flat = flatten_levels(feats)  # (B, 4 + C, A)
    reg, cls_logits = flat.split((4, nc), 1)
    scores = cls_logits.float().sigmoid().transpose(1, 2)  # (B, A, C)
    top, idx = topk_candidates(scores.flatten(1), k)  # (B, k) over A * C
    a_idx, lab = idx // nc, idx % nc
    if grid is None:
        grid = grid_points([tuple(f.shape[2:]) for f in feats], strides, device=flat.device)
    points, stride_t = grid
    r = reg.float().gather(2, a_idx[:, None, :].expand(-1, 4, -1)).transpose(1, 2)  # (B, k, 4)
    boxes = decode_boxes(r, points[a_idx], stride_t[a_idx], exp_on_reg=bool(getattr(net, "exp_on_reg", False)))
    return pack_candidates(boxes, top, lab)


def _check_raw(feats: list[Tensor], *, nc: int, n_levels: int) -> None:
    if len(feats) != n_levels:
        raise ConfigError(
            f"rtmdet postprocess expects {n_levels} output levels, got {len(feats)}: pass the "
            "network's raw output list unchanged"
        )
    for i, f in enumerate(feats):
        if f.dim() != 4 or f.shape[1] != 4 + nc:
            raise ConfigError(
                f"rtmdet output level {i} has shape {tuple(f.shape)}; expected (B, {4 + nc}, h, w) "
                f"= 4 box distances + nc ({nc}) class logits. Was the network built with a "
                "different number of classes?"
            )
