"""YOLOv1 decode and postprocess (Darknet's ``[detection]`` layer at test time).

The raw output Tensor[B, S*S*(C + 5 B)] is split (:func:`split`) into class probabilities
Tensor[B, S*S, C], confidences Tensor[B, S*S, B] and boxes Tensor[B, S*S, B, 4], cells row-major.
A box of cell ``(row, col)`` is centred at ``((x + col) / S, (y + row) / S)`` of the input with
size ``(w'^2, h'^2)`` (the network predicts square roots); its class-specific confidence for class
``c`` is ``Pr(c | object) * confidence`` (the paper's test-time score), each factor clamped to
[0, 1] (the outputs are linear; Darknet multiplies them unclamped). Every (box, class) pair is a
candidate, as in Darknet's per-class NMS.

:func:`decode` is the captured part of prediction: a pure, shape-static function of the raw
output giving the ``k`` best (box, class) pairs per image. :func:`postprocess` is the eager path
over every pair: threshold at ``conf``, class-aware (or agnostic) NMS, ``max_det``.
"""

from __future__ import annotations

from typing import Any

import torch
from torch import Tensor

from ...errors import ConfigError
from ...ops.candidates import pack_candidates, topk_candidates
from ...ops.nms import non_max_suppression


def _raw(raw: Any) -> Tensor:
    """The one output tensor (an ONNX Runtime backend hands a list of one)."""
    return raw[0] if isinstance(raw, (list, tuple)) else raw


def split(raw: Tensor, *, S: int, B: int, nc: int) -> tuple[Tensor, Tensor, Tensor]:
    """Tensor[N, S*S*(nc + 5B)] -> (classes Tensor[N, S*S, nc], confidences Tensor[N, S*S, B],
    boxes Tensor[N, S*S, B, 4] raw ``x, y, sqrt w, sqrt h``), float32 views in Darknet's order."""
    n, cells = raw.shape[0], S * S
    if raw.dim() != 2 or raw.shape[1] != cells * (nc + 5 * B):
        raise ConfigError(f"yolo1 output has shape {tuple(raw.shape)}; expected (batch, {cells * (nc + 5 * B)}) = "
                          f"{S} x {S} cells x ({nc} classes + 5 x {B} boxes). Was the network built with a "
                          "different number of classes?")
    r = raw.float()
    cls = r[:, :cells * nc].reshape(n, cells, nc)
    conf = r[:, cells * nc:cells * (nc + B)].reshape(n, cells, B)
    box = r[:, cells * (nc + B):].reshape(n, cells, B, 4)
    return cls, conf, box


def cell_grid(S: int, *, device: torch.device | str = "cpu") -> Tensor:
    """Tensor[S*S, 1, 2] float32: (col, row) of each cell, row-major."""
    gy, gx = torch.meshgrid(torch.arange(S, device=device, dtype=torch.float32),
                            torch.arange(S, device=device, dtype=torch.float32), indexing="ij")
    return torch.stack((gx, gy), -1).reshape(S * S, 1, 2)


def boxes_xyxy(box: Tensor, *, S: int, size: float, grid: Tensor | None = None) -> Tensor:
    """Raw boxes Tensor[N, S*S, B, 4] -> x1, y1, x2, y2 in pixels of the ``size`` x ``size`` input."""
    if grid is None:
        grid = cell_grid(S, device=box.device)
    cxy = (box[..., :2] + grid) / S
    half = box[..., 2:4].square() / 2  # w, h = (sqrt w)^2
    return torch.cat((cxy - half, cxy + half), -1) * size


def scores(cls: Tensor, conf: Tensor) -> Tensor:
    """Class-specific confidences Tensor[N, S*S, B, nc] = clamp(Pr(c)) * clamp(confidence)."""
    return conf.clamp(0, 1)[..., None] * cls.clamp(0, 1)[:, :, None, :]


def decode(raw: Any, *, net: Any, k: int, grid: Tensor | None = None) -> Tensor:
    """The capturable decode: raw output -> Tensor[N, min(k, S*S*B*nc), 6] float32 candidates
    (x1, y1, x2, y2 in input pixels, class-specific confidence, class id) by decreasing score."""
    S, B, nc = int(net.S), int(net.B), int(net.nc)
    cls, conf, box = split(_raw(raw), S=S, B=B, nc=nc)
    xyxy = boxes_xyxy(box, S=S, size=float(net.input_size), grid=grid).reshape(box.shape[0], -1, 4)  # (N, S*S*B, 4)
    top, idx = topk_candidates(scores(cls, conf).flatten(1), k)  # over (cell, box, class)
    picked = xyxy.gather(1, (idx // nc)[..., None].expand(-1, -1, 4))
    return pack_candidates(picked, top, idx % nc)


def postprocess(raw: Any, *, net: Any, conf: float, iou: float, classes: list[int] | None, max_det: int,
                agnostic: bool) -> list[Tensor]:
    """Raw output -> per image Tensor[n, 6] float32 (x1, y1, x2, y2 input pixels, score, class id),
    by decreasing score, ``n <= max_det``; ``classes`` keeps only those class ids."""
    S, B, nc = int(net.S), int(net.B), int(net.nc)
    cls, cf, box = split(_raw(raw), S=S, B=B, nc=nc)
    n = box.shape[0]
    xyxy = boxes_xyxy(box, S=S, size=float(net.input_size)).reshape(n, -1, 1, 4)  # (N, S*S*B, 1, 4)
    sc = scores(cls, cf).reshape(n, -1, nc)  # (N, S*S*B, nc)
    if classes is not None:
        keep_cls = torch.zeros(nc, dtype=torch.bool, device=sc.device)
        keep_cls[list(classes)] = True
        sc = sc * keep_cls
    out = []
    for b in range(n):
        bi, ci = torch.nonzero(sc[b] > conf, as_tuple=True)
        boxes, s = xyxy[b, bi, 0], sc[b, bi, ci]
        keep = non_max_suppression(boxes, s, ci, iou=iou, max_det=max_det, agnostic=agnostic)
        out.append(torch.cat((boxes[keep], s[keep, None], ci[keep, None].float()), 1))
    return out
