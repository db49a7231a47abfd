"""The anchor-based head of the Darknet lineage: one 1x1 conv (with bias) per level.

The anchors (a buffer, Tensor[nl, na, 2] in input pixels) and the per-level ``scale_xy`` (YOLOv4's
grid-sensitivity factor; 1.0 for YOLOv3) travel with the head, so postprocess, decode and loss
read them from the network and a checkpoint restores them.
"""

from __future__ import annotations

import math
from collections.abc import Sequence

import torch
from torch import Tensor, nn


class AnchorHead(nn.Module):
    """feats ([Tensor[B, ch_i, h_i, w_i]], levels in ``strides`` order) ->
    [Tensor[B, na * (5 + nc), h_i, w_i]] raw logits, channels laid out ``(anchor, field)``:
    per anchor ``tx, ty, tw, th, obj, cls_0..cls_{nc-1}`` (the Darknet ``[yolo]`` layout).

    anchors: per level ``na`` (w, h) pairs in input pixels; strides: one per level;
    scale_xy: per level factor of the centre offset (``sigmoid * s - (s - 1) / 2``);
    cls_act: ``"sigmoid"`` (independent class probabilities, YOLOv3/v4) or ``"softmax"`` (YOLOv2).
    """

    def __init__(self, *, nc: int, ch: Sequence[int], anchors: Sequence[Sequence[tuple[float, float]]],
                 strides: Sequence[int], scale_xy: Sequence[float] | None = None,
                 cls_act: str = "sigmoid") -> None:
        super().__init__()
        self.nc = nc
        self.no = 5 + nc
        self.na = len(anchors[0])
        self.strides = tuple(int(s) for s in strides)
        if cls_act not in ("sigmoid", "softmax"):
            raise ValueError(f"cls_act must be 'sigmoid' or 'softmax', got {cls_act!r}")
        self.cls_act = cls_act
        self.scale_xy = tuple(float(v) for v in (scale_xy or [1.0] * len(self.strides)))
        self.register_buffer("anchors", torch.tensor(anchors, dtype=torch.float32).view(len(anchors), self.na, 2))
        self.m = nn.ModuleList(nn.Conv2d(c, self.na * self.no, 1) for c in ch)

    @torch.no_grad()
    def init_bias(self, *, imgsz: int) -> None:
        """Objectness starts at the prior of ~8 objects per ``imgsz`` image, ``log(8 / (imgsz / s) ** 2)``;
        class logits at ``log(0.6 / (nc - 0.99))`` (the priors of the Ultralytics YOLOv3 port; Darknet
        starts from zero biases, which makes the first steps mostly background loss)."""
        for conv, s in zip(self.m, self.strides, strict=True):
            b = conv.bias.view(self.na, self.no)
            b[:, 4].fill_(math.log(8 / (imgsz / s) ** 2))
            b[:, 5:].fill_(math.log(0.6 / (self.nc - 0.99)))

    def forward(self, feats: Sequence[Tensor]) -> list[Tensor]:
        return [m(x) for m, x in zip(self.m, feats, strict=True)]
