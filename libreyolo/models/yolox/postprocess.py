"""YOLOX raw head outputs -> detections (eager; never captured in a CUDA graph).

Decode, per anchor (grid cell ``(gx, gy)`` of a level with stride ``s``, no half-cell offset as
in the reference): centre ``((tx, ty) + (gx, gy)) * s``, size ``exp(tw, th) * s``; score
``sigmoid(obj) * sigmoid(cls)`` of the best class (single label). Anchors under ``conf`` are
dropped, the survivors capped at ``max_candidates`` by score, then class-aware (or agnostic)
NMS and ``max_det``.
"""

from __future__ import annotations

import torch
from torch import Tensor, nn

from ...errors import ConfigError
from ...ops.boxes import xywh_to_xyxy
from ...ops.candidates import pack_candidates, topk_candidates
from ...ops.nms import non_max_suppression

MAX_CANDIDATES = 30_000
MAX_LOG_SIZE = 20.0  # clamp on tw, th before exp: keeps garbage logits from making inf boxes


def make_grid(feat_shapes: list[tuple[int, int]], strides: tuple[int, ...] | list[int], *,
              device: torch.device | str = "cpu") -> tuple[Tensor, Tensor]:
    """Cell corners of every level, row-major, levels in stride order.

    Returns grid (Tensor[A, 2], float32) x, y in grid units of its level (integers) and
    stride (Tensor[A, 1], float32), A = sum(h_i * w_i).
    """
    grids, strides_out = [], []
    for (h, w), s in zip(feat_shapes, strides, strict=True):
        gy, gx = torch.meshgrid(torch.arange(h, device=device, dtype=torch.float32),
                                torch.arange(w, device=device, dtype=torch.float32), indexing="ij")
        grids.append(torch.stack((gx, gy), -1).view(-1, 2))
        strides_out.append(torch.full((h * w, 1), float(s), device=device))
    return torch.cat(grids), torch.cat(strides_out)


def flatten_outputs(raw: list[Tensor] | tuple[Tensor, ...]) -> Tensor:
    """[Tensor[B, 5 + nc, h_i, w_i]] -> Tensor[B, A, 5 + nc] float32, levels concatenated."""
    b, c = raw[0].shape[:2]
    return torch.cat([f.float().reshape(b, c, -1) for f in raw], 2).transpose(1, 2)


def decode_boxes(reg: Tensor, grid: Tensor, stride: Tensor) -> Tensor:
    """reg (Tensor[..., A, 4]) raw tx, ty, tw, th -> (Tensor[..., A, 4]) cx, cy, w, h in pixels.

    grid (Tensor[A, 2]) and stride (Tensor[A, 1]) as from :func:`make_grid`.
    """
    xy = (reg[..., :2] + grid) * stride
    wh = reg[..., 2:4].clamp(max=MAX_LOG_SIZE).exp() * stride
    return torch.cat((xy, wh), -1)


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

    raw: one Tensor[B, 5 + nc, H / s, W / s] per level (reg tx, ty, tw, th; obj logit; class
    logits), levels in ``net.strides`` order, any float dtype (decoded in float32). ``net``
    supplies ``nc`` and ``strides``. With ``classes`` given, each anchor's best class is taken
    among those classes only. Returns, per image, Tensor[n, 6] float32 on the input's device:
    x1, y1, x2, y2 in network-input pixels, score in (0, 1], class id as float; rows sorted by
    decreasing score, ``n <= max_det``.

    Example:
        >>> net = build_yolox(size="nano", nc=80).eval()  # doctest: +SKIP
        >>> dets = postprocess(net(x), net=net, conf=0.25, iou=0.65, classes=None,
        ...                    max_det=300, agnostic=False)  # doctest: +SKIP
    """
    nc, strides = int(net.nc), tuple(int(s) for s in net.strides)
    feats = list(raw)
    _check_raw(feats, nc=nc, n_levels=len(strides))
    device = feats[0].device
    bsz = feats[0].shape[0]
    if classes is not None and len(classes) == 0:
        return [torch.zeros((0, 6), device=device) for _ in range(bsz)]
    x = flatten_outputs(feats)  # (B, A, 5 + C)
    cls_logits = x[..., 5:]
    class_ids: Tensor | None = None
    if classes is not None:
        class_ids = torch.as_tensor(list(classes), dtype=torch.long, device=device)
        cls_logits = cls_logits.index_select(2, class_ids)
    best_logit, best = cls_logits.max(2)  # (B, A); sigmoid is monotonic
    scores = x[..., 4].sigmoid() * best_logit.sigmoid()  # (B, A)
    labels = class_ids[best] if class_ids is not None else best
    grid, stride = make_grid([tuple(f.shape[2:]) for f in feats], strides, device=device)

    out = []
    for b in range(bsz):
        idx = torch.nonzero(scores[b] > conf).squeeze(1)  # (N,)
        if idx.numel() > max_candidates:
            idx = idx[scores[b, idx].topk(max_candidates).indices]
        boxes = xywh_to_xyxy(decode_boxes(x[b, idx, :4], grid[idx], stride[idx]))  # (N, 4)
        s, lab = scores[b, idx], labels[b, idx]
        keep = non_max_suppression(boxes, s, lab, iou=iou, max_det=max_det, agnostic=agnostic)
        out.append(torch.cat((boxes[keep], s[keep, None], lab[keep, None].float()), 1))
    return out


def decode(raw: list[Tensor] | tuple[Tensor, ...], *, net: nn.Module, k: int,
           grid: tuple[Tensor, Tensor] | None = None) -> Tensor:
    """The capturable decode: raw outputs -> Tensor[B, min(k, A), 6] float32 candidates (x1, y1,
    x2, y2 in network-input pixels, score = objectness x best class, class id) by decreasing
    score. Same per-anchor math as :func:`postprocess`, on a fixed number of anchors."""
    nc, strides = int(net.nc), tuple(int(s) for s in net.strides)
    feats = list(raw)
    _check_raw(feats, nc=nc, n_levels=len(strides))
    x = flatten_outputs(feats)  # (B, A, 5 + C)
    best_logit, best = x[..., 5:].max(2)  # (B, A)
    top, idx = topk_candidates(x[..., 4].sigmoid() * best_logit.sigmoid(), k)  # (B, k)
    if grid is None:
        grid = make_grid([tuple(f.shape[2:]) for f in feats], strides, device=x.device)
    g, stride = grid
    reg = x[..., :4].gather(1, idx[..., None].expand(-1, -1, 4))  # (B, k, 4)
    boxes = xywh_to_xyxy(decode_boxes(reg, g[idx], stride[idx]))  # (B, k, 4)
    return pack_candidates(boxes, top, best.gather(1, idx))


def _check_raw(feats: list[Tensor], *, nc: int, n_levels: int) -> None:
    if len(feats) != n_levels:
        raise ConfigError(
            f"yolox postprocess expects {n_levels} output levels, got {len(feats)}: pass the "
            "network's raw output list unchanged"
        )
    want = 5 + nc
    for i, f in enumerate(feats):
        if f.dim() != 4 or f.shape[1] != want:
            raise ConfigError(
                f"yolox output level {i} has shape {tuple(f.shape)}; expected (B, {want}, h, w) = "
                f"4 box + 1 objectness + nc ({nc}) channels. Was the network built with a "
                "different number of classes?"
            )
