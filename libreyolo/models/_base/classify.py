"""Shared glue of the image-classification families (task ``classify``, ``-cls`` weights).

A classify family supplies only :meth:`Family.build_net` (Tensor[B, 3, H, W] float in [0, 1] ->
logits Tensor[B, nc], in train and eval mode); this base class holds the rest: softmax
postprocess, the cross-entropy criterion and the class declarations. Shared code recognises a
classifier by the capability ``OUTPUT_KIND == "probs"`` (never by family name): the predictor
then center-crops instead of letterboxing and fills ``Results.probs``, the trainer reads
ImageFolder datasets (:mod:`libreyolo.data.classify`) and the validator reports top-1 / top-5.
"""

from __future__ import annotations

from typing import Any, ClassVar

import torch
from torch import Tensor, nn

from .family import Family


class ClassifyFamily(Family):
    TASKS: ClassVar[tuple[str, ...]] = ("classify",)
    OUTPUT_KIND: ClassVar[str] = "probs"
    DEFAULT_IMGSZ: ClassVar[int] = 224
    STRIDE: ClassVar[int] = 32
    LOSS_NAMES: ClassVar[tuple[str, ...]] = ("cls",)
    OUTPUT_NAMES: ClassVar[tuple[str, ...]] = ("logits",)
    EXPORT_DYNAMIC_AXES: ClassVar[tuple[str, ...]] = ("batch",)
    LABEL_SMOOTHING: ClassVar[float] = 0.1
    SUPPORTS_CUDA_GRAPH: ClassVar[bool] = False
    CUDA_GRAPH_REASON: ClassVar[str] = "no bitwise parity run recorded yet"
    SUPPORTS_TRAIN_CUDA_GRAPH: ClassVar[bool] = False
    TRAIN_CUDA_GRAPH_REASON: ClassVar[str] = "no bitwise parity run recorded yet"

    def postprocess(self, raw: Any, *, conf: float = 0.0, iou: float = 0.0, classes: list[int] | None = None,
                    max_det: int = 0, agnostic: bool = False) -> list[Tensor]:
        """Logits Tensor[B, nc] -> per image Tensor[nc] float32 class probabilities (softmax).

        ``conf``, ``iou``, ``classes``, ``max_det`` and ``agnostic`` are detection options and are
        ignored: a classifier always returns the full distribution.
        """
        logits = raw[0] if isinstance(raw, (list, tuple)) else raw
        return list(torch.softmax(logits.float(), dim=1).unbind(0))

    def build_criterion(self) -> ClassificationLoss:
        return ClassificationLoss(label_smoothing=self.LABEL_SMOOTHING)


class ClassificationLoss:
    """Cross-entropy with label smoothing.

    ``criterion(logits, batch) -> (loss, items)``: logits Tensor[B, nc]; ``batch["cls"]``
    Tensor[B] (int) class ids; loss = mean cross-entropy x B (the trainer's loss scale: a sum over
    the batch, as for detection), items = Tensor[1] (the mean cross-entropy, detached).
    """

    def __init__(self, *, label_smoothing: float = 0.1) -> None:
        self.label_smoothing = float(label_smoothing)
        self.hyp: dict[str, float] = {}

    def __call__(self, preds: Any, batch: dict[str, Any]) -> tuple[Tensor, Tensor]:
        logits = preds[0] if isinstance(preds, (list, tuple)) else preds
        target = batch["cls"].to(logits.device).view(-1).long()
        ce = nn.functional.cross_entropy(logits.float(), target, label_smoothing=self.label_smoothing)
        return ce * logits.shape[0], ce.detach().view(1)
