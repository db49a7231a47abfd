"""Shared glue of the semantic-segmentation families (task ``semantic``, ``-sem`` weights).

A semantic family supplies only :meth:`Family.build_net` (Tensor[B, 3, H, W] float in [0, 1] ->
logits Tensor[B, nc, h, w] at a fraction of the input, in train and eval mode); this base class
holds the rest: the postprocess (per-image logits, which the task maps back to the original
image: :mod:`libreyolo.tasks.semantic`), the cross-entropy criterion with ignored pixels, and the
declarations. Shared code recognises such a family by ``OUTPUT_KIND == "semantic"``.
"""

from __future__ import annotations

from typing import Any, ClassVar

import torch  # noqa: F401 - the docstring example uses it
import torch.nn.functional as F
from torch import Tensor

from ...data.semantic import IGNORE
from .family import Family


class SemanticFamily(Family):
    TASKS: ClassVar[tuple[str, ...]] = ("semantic",)
    OUTPUT_KIND: ClassVar[str] = "semantic"
    DEFAULT_IMGSZ: ClassVar[int] = 512
    STRIDE: ClassVar[int] = 32
    LOSS_NAMES: ClassVar[tuple[str, ...]] = ("ce",)
    OUTPUT_NAMES: ClassVar[tuple[str, ...]] = ("logits",)
    EXPORT_DYNAMIC_AXES: ClassVar[tuple[str, ...]] = ("batch", "height", "width")
    SUPPORTS_CUDA_GRAPH: ClassVar[bool] = False
    CUDA_GRAPH_REASON: ClassVar[str] = "no bitwise parity run recorded yet"
    SUPPORTS_TRAIN_CUDA_GRAPH: ClassVar[bool] = False
    TRAIN_CUDA_GRAPH_REASON: ClassVar[str] = "no bitwise parity run recorded yet"

    def postprocess(self, raw: Any, *, conf: float = 0.0, iou: float = 0.0, classes: list[int] | None = None,
                    max_det: int = 0, agnostic: bool = False) -> list[Tensor]:
        """Logits Tensor[B, nc, h, w] -> per image Tensor[nc, h, w] float32 logits (the task
        upsamples them to the image and takes the arg-max). The detection options are ignored."""
        logits = raw[0] if isinstance(raw, (list, tuple)) else raw
        return list(logits.float().unbind(0))

    def build_criterion(self) -> SemanticLoss:
        return SemanticLoss()


class SemanticLoss:
    """Pixel cross-entropy over the labelled pixels.

    ``criterion(logits, batch) -> (loss, items)``: logits Tensor[B, nc, h, w] are upsampled
    bilinearly to the mask size; ``batch["mask"]`` Tensor[B, H, W] int64 holds class ids and
    :data:`~libreyolo.data.semantic.IGNORE` where a pixel is not scored. loss = the mean
    cross-entropy over the scored pixels x B (the trainer's loss scale: a sum over the batch, as
    for detection); items = Tensor[1] (the mean, detached). A batch without a scored pixel gives
    0 (no host sync: the mean divides by the count clamped to 1).

    Example:
        >>> logits = torch.zeros(1, 2, 2, 2); logits[0, 1] = 5.0
        >>> loss, items = SemanticLoss()(logits, {"mask": torch.tensor([[[1, 1], [1, IGNORE]]])})
        >>> round(float(items), 4)
        0.0067
    """

    def __init__(self) -> None:
        self.hyp: dict[str, float] = {}

    def __call__(self, preds: Any, batch: dict[str, Any]) -> tuple[Tensor, Tensor]:
        logits = preds[0] if isinstance(preds, (list, tuple)) else preds
        target = batch["mask"].to(logits.device, non_blocking=True).long()
        if tuple(logits.shape[2:]) != tuple(target.shape[1:]):
            logits = F.interpolate(logits, size=tuple(target.shape[1:]), mode="bilinear", align_corners=False)
        total = F.cross_entropy(logits.float(), target, ignore_index=IGNORE, reduction="sum")
        ce = total / (target != IGNORE).sum().clamp(min=1)
        return ce * logits.shape[0], ce.detach().view(1)
