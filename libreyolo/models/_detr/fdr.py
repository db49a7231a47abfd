"""Fine-grained Distribution Refinement (FDR) of D-FINE: box edges as distributions.

Each box edge (left, top, right, bottom) is predicted as logits over ``reg_max + 1`` bins. The
bins' values come from the non-uniform :func:`weighting_function` (dense near zero, sparse at
the ends: ``[-2a, -(s^k - 1), ..., 0, ..., s^k - 1, 2a]`` with ``a = |up| * |reg_scale|`` and
``s = (a + 1)^(2 / (reg_max - 2))``); the edge offset is the expectation
(:func:`distribution_integral`), and :func:`distance_to_box` turns the four offsets, measured
relative to a reference box, into a box. Each decoder layer adds its logits to the previous
layer's (residual refinement of the distribution).

:func:`box_to_distance` is the inverse used by the FGL loss: the fractional bin index of each
ground-truth edge with the weights of its two neighbouring bins.

All functions are elementwise tensor math (no host sync); the decoding part runs in capture.
"""

from __future__ import annotations

import torch
import torch.nn.functional as F
from torch import Tensor, nn

from ...ops.boxes import xyxy_to_xywh
from .common import MLP


def weighting_function(reg_max: int, up: float, reg_scale: float, *, device: torch.device | None = None,
                       dtype: torch.dtype = torch.float32) -> Tensor:
    """Bin values W(n), Tensor[reg_max + 1], increasing, symmetric around the middle bin (0)."""
    a = abs(up) * abs(reg_scale)
    step = (a + 1.0) ** (2.0 / (reg_max - 2))
    half = reg_max // 2
    left = [-(step ** i) + 1.0 for i in range(half - 1, 0, -1)]
    right = [step ** i - 1.0 for i in range(1, half)]
    values = [-2.0 * a, *left, 0.0, *right, 2.0 * a]
    return torch.tensor(values, device=device, dtype=dtype)


def distribution_integral(logits: Tensor, project: Tensor) -> Tensor:
    """Expected edge offsets. logits (Tensor[..., 4 * (reg_max + 1)]), project (Tensor[reg_max + 1])
    -> Tensor[..., 4]."""
    n = int(project.shape[0])
    prob = logits.reshape(*logits.shape[:-1], 4, n).softmax(-1)
    return (prob * project.to(prob.dtype)).sum(-1)


def distance_to_box(ref: Tensor, dist: Tensor, reg_scale: float) -> Tensor:
    """Box from a reference and edge offsets. ref (Tensor[..., 4] cxcywh), dist (Tensor[..., 4]:
    left, top, right, bottom, in units of ``w / reg_scale`` / ``h / reg_scale`` beyond the
    half-size ``0.5 * reg_scale``) -> Tensor[..., 4] cxcywh."""
    rs = abs(reg_scale)
    cx, cy, w, h = ref.unbind(-1)
    left, top, right, bottom = dist.unbind(-1)
    x1 = cx - (0.5 * rs + left) * (w / rs)
    y1 = cy - (0.5 * rs + top) * (h / rs)
    x2 = cx + (0.5 * rs + right) * (w / rs)
    y2 = cy + (0.5 * rs + bottom) * (h / rs)
    return xyxy_to_xywh(torch.stack([x1, y1, x2, y2], -1))


@torch.no_grad()
def box_to_distance(ref: Tensor, box_xyxy: Tensor, *, reg_max: int, up: float, reg_scale: float,
                    eps: float = 0.1) -> tuple[Tensor, Tensor, Tensor]:
    """FGL targets: ref (Tensor[N, 4] cxcywh), box_xyxy (Tensor[N, 4]) -> (index Tensor[4N] float:
    the bin at or left of each edge's offset, clamped to ``[0, reg_max - eps]``; weight_right,
    weight_left Tensor[4N]: linear-interpolation weights of bins ``floor(index)`` and
    ``floor(index) + 1``). Offsets beyond the ends go fully to the end bin."""
    rs = abs(reg_scale)
    cx, cy, w, h = ref.unbind(-1)
    sx, sy = w / rs + 1e-16, h / rs + 1e-16
    lens = torch.stack([(cx - box_xyxy[:, 0]) / sx - 0.5 * rs, (cy - box_xyxy[:, 1]) / sy - 0.5 * rs,
                        (box_xyxy[:, 2] - cx) / sx - 0.5 * rs, (box_xyxy[:, 3] - cy) / sy - 0.5 * rs], -1).reshape(-1)
    values = weighting_function(reg_max, up, reg_scale, device=lens.device, dtype=lens.dtype)
    left = (values[None] <= lens[:, None]).sum(1) - 1  # index of the closest bin at or left of the offset
    idx = left.to(lens.dtype)
    w_right = torch.zeros_like(lens)
    w_left = torch.zeros_like(lens)
    ok = (left >= 0) & (left < reg_max)
    li = left.clamp(0, reg_max - 1)
    lv, rv = values[li], values[li + 1]
    dl, dr = (lens - lv).abs(), (rv - lens).abs()
    frac = dl / (dl + dr)
    w_right = torch.where(ok, frac, w_right)
    w_left = torch.where(ok, 1.0 - frac, w_left)
    below, above = left < 0, left >= reg_max
    w_right = torch.where(below, torch.zeros_like(w_right), torch.where(above, torch.ones_like(w_right), w_right))
    w_left = torch.where(below, torch.ones_like(w_left), torch.where(above, torch.zeros_like(w_left), w_left))
    idx = torch.where(below, torch.zeros_like(idx), torch.where(above, torch.full_like(idx, reg_max - 0.1), idx))
    return idx.clamp(0.0, reg_max - eps), w_right, w_left


class LocalizationQuality(nn.Module):
    """LQE: adds a score from the distribution statistics (top-``k`` bin probabilities per edge and
    their mean) to the class logits. scores (Tensor[B, Q, nc]), corners (Tensor[B, Q, 4 * (reg_max
    + 1)]) -> Tensor[B, Q, nc]."""

    def __init__(self, *, k: int = 4, hidden: int = 64, num_layers: int = 2, reg_max: int = 32,
                 act: str = "relu") -> None:
        super().__init__()
        self.k, self.reg_max = k, reg_max
        self.reg_conf = MLP(4 * (k + 1), hidden, 1, num_layers=num_layers, act=act)
        nn.init.zeros_(self.reg_conf.layers[-1].weight)
        nn.init.zeros_(self.reg_conf.layers[-1].bias)

    def forward(self, scores: Tensor, corners: Tensor) -> Tensor:
        b, q, _ = corners.shape
        prob = F.softmax(corners.reshape(b, q, 4, self.reg_max + 1), dim=-1)
        top = prob.topk(self.k, dim=-1).values
        stat = torch.cat([top, top.mean(-1, keepdim=True)], -1)
        return scores + self.reg_conf(stat.reshape(b, q, -1))
