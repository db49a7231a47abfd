"""Shared glue of the point (object-centroid) families (task ``point``, ``-point`` weights).

A point family supplies only :meth:`Family.build_net` (Tensor[B, 3, H, W] float in [0, 1] ->
logits Tensor[B, nc + 1, H/s, W/s] per cell, channel 0 background, in train and eval mode); this
base class holds the rest: the postprocess (cells -> points, :mod:`libreyolo.ops.points`),
the weighted cross-entropy criterion over the centroid class map, and the declarations. Shared
code recognises such a family by ``OUTPUT_KIND == "points"``.
"""

from __future__ import annotations

from typing import Any, ClassVar

import torch  # noqa: F401 - the docstring example uses it
import torch.nn.functional as F
from torch import Tensor

from ...ops.points import centroid_targets, decode_points
from .family import Family

OBJECT_WEIGHT = 100.0  # cross-entropy weight of an object cell (background cells: 1)


class PointFamily(Family):
    TASKS: ClassVar[tuple[str, ...]] = ("point",)
    OUTPUT_KIND: ClassVar[str] = "points"
    DEFAULT_IMGSZ: ClassVar[int] = 320
    STRIDE: ClassVar[int] = 32  # input sizes: multiples of 32, as the detection datasets make them
    CELL_STRIDE: ClassVar[int] = 8  # the output grid's stride
    LOSS_NAMES: ClassVar[tuple[str, ...]] = ("wce",)
    OUTPUT_NAMES: ClassVar[tuple[str, ...]] = ("logits",)
    EXPORT_DYNAMIC_AXES: ClassVar[tuple[str, ...]] = ("batch", "height", "width")
    SUPPORTS_CUDA_GRAPH: ClassVar[bool] = False
    CUDA_GRAPH_REASON: ClassVar[str] = "no bitwise parity run recorded yet"
    SUPPORTS_TRAIN_CUDA_GRAPH: ClassVar[bool] = False
    TRAIN_CUDA_GRAPH_REASON: ClassVar[str] = "no bitwise parity run recorded yet"

    def postprocess(self, raw: Any, *, conf: float = 0.5, iou: float = 0.0, classes: list[int] | None = None,
                    max_det: int = 300, agnostic: bool = False) -> list[Tensor]:
        """Logits Tensor[B, nc + 1, h, w] -> per image Tensor[n, 4] float32 CPU points ``x, y, conf,
        cls`` in input pixels (:func:`~libreyolo.ops.points.decode_points`: object cells
        at or above ``conf``, touching cells of one class merged). ``iou`` and ``agnostic`` do not
        apply."""
        logits = raw[0] if isinstance(raw, (list, tuple)) else raw
        return decode_points(logits, stride=self.CELL_STRIDE, conf=conf, classes=classes, max_det=max_det)

    def build_criterion(self) -> PointLoss:
        return PointLoss()


class PointLoss:
    """Weighted cross-entropy over the cells, FOMO's loss.

    ``criterion(logits, batch) -> (loss, items)``: logits Tensor[B, nc + 1, h, w]; ``batch`` is a
    detection batch (``batch_idx``, ``cls``, ``bboxes`` normalised cx cy w h). The target is the
    centroid class map (:func:`~libreyolo.ops.points.centroid_targets`); every cell's
    cross-entropy is weighted ``object_weight`` on object cells and 1 on background, and averaged
    over all cells. loss = that mean x B (the trainer's loss scale: a sum over the batch, as for
    detection); items = Tensor[1] (the mean, detached). No host synchronisation.

    Example:
        >>> logits = torch.zeros(1, 3, 2, 2); logits[0, 0] = 4.0; logits[0, 2, 0, 1] = 8.0
        >>> b = {"batch_idx": torch.tensor([0]), "cls": torch.tensor([1]), "bboxes": torch.tensor([[0.7, 0.2, 0.1, 0.1]])}
        >>> loss, items = PointLoss()(logits, b)
        >>> round(float(items), 4)
        0.489
    """

    def __init__(self, object_weight: float = OBJECT_WEIGHT) -> None:
        self.hyp: dict[str, float] = {"object_weight": float(object_weight)}

    def __call__(self, preds: Any, batch: dict[str, Any]) -> tuple[Tensor, Tensor]:
        logits = preds[0] if isinstance(preds, (list, tuple)) else preds
        b, _, h, w = logits.shape
        target = centroid_targets(batch, grid_hw=(h, w), batch_size=b, device=logits.device)
        ce = F.cross_entropy(logits.float(), target, reduction="none")
        weight = torch.where(target > 0, self.hyp["object_weight"], 1.0)
        mean = (ce * weight).mean()
        return mean * b, mean.detach().view(1)
