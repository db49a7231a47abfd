"""DINO (DETR with Improved deNoising anchOr boxes) detection family: size r50 (4-scale); weights
``LibreDINODETRr50.pt``."""

from __future__ import annotations

from typing import Any, ClassVar

from torch import nn

from .._detr.family import EncoderDecoderFamily


class DINODETR(EncoderDecoderFamily):
    """DINO (arXiv:2203.03605): ResNet-50, Deformable DETR's 4-level deformable encoder, mixed
    query selection (900 queries), 6 decoder layers with look-forward-twice box refinement,
    contrastive denoising training; no NMS.

    Seam (SPEC G-9), as RT-DETR's: prediction = backbone+encoder, then decoder+heads (both
    capturable: fixed shapes, no host sync); training = backbone+encoder (capturable, the train-mode
    ``net(x)``), then decoder with denoising queries + Hungarian criterion (eager). Flags stay
    ``False`` until GPU parity rows exist.
    """

    FAMILY: ClassVar[str] = "dino_detr"
    NAME_TOKEN: ClassVar[str] = "DINODETR"
    SIZES: ClassVar[tuple[str, ...]] = ("r50",)
    LOSS_NAMES: ClassVar[tuple[str, ...]] = ("focal", "l1", "giou")

    SUPPORTS_CUDA_GRAPH: ClassVar[bool] = True  # docs/cuda-graph-parity.json (6ceda2f)
    SUPPORTS_TRAIN_CUDA_GRAPH: ClassVar[bool] = True  # docs/cuda-graph-training-parity.json

    # The reference recipe: AdamW, lr 1e-4, weight decay 1e-4. Not modelled: the backbone's 1e-5
    # learning rate and the gradient-norm clip 0.1 (the trainer's own ``clip_grad`` applies).
    TRAIN_DEFAULTS: ClassVar[dict[str, object]] = {
        "optimizer": "AdamW", "lr0": 1e-4, "momentum": 0.9, "weight_decay": 1e-4, "mosaic": 0.0,
        "warmup_bias_lr": 0.0,
    }

    @classmethod
    def build_net(cls, *, size: str, nc: int, task: str) -> nn.Module:
        from .nn import build_dino_detr

        return build_dino_detr(size=size, nc=nc)

    def build_criterion(self) -> Any:
        from .loss import build_dino_detr_loss

        return build_dino_detr_loss(self.net)
