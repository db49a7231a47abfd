"""LW-DETR detection family: sizes tiny, small, medium, large and xlarge; weights ``LibreLWDETRtiny.pt``."""

from __future__ import annotations

from typing import Any, ClassVar

from torch import nn

from .._detr.family import EncoderDecoderFamily


class LWDETR(EncoderDecoderFamily):
    """LW-DETR (arXiv:2406.03459): plain ViT with interleaved window / global attention, C2f
    projector to one stride-16 map (large / xlarge: stride-8 and stride-32 maps), two-stage
    Group-DETR queries, 3 deformable decoder layers; no NMS.

    Seam (SPEC G-9), as the other DETRs: prediction = backbone+projector, then decoder+heads (both
    capturable); training = backbone+projector (capturable), then the 13-group decoder + Hungarian
    criterion (eager). Flags stay ``False`` until GPU parity rows exist.
    """

    FAMILY: ClassVar[str] = "lw_detr"
    NAME_TOKEN: ClassVar[str] = "LWDETR"
    SIZES: ClassVar[tuple[str, ...]] = ("tiny", "small", "medium", "large", "xlarge")
    STRIDE: ClassVar[int] = 64  # 16 px patches x 4 windows per side
    LOSS_NAMES: ClassVar[tuple[str, ...]] = ("focal", "l1", "giou")

    SUPPORTS_CUDA_GRAPH: ClassVar[bool] = True  # docs/cuda-graph-parity.json (6ceda2f)
    SUPPORTS_TRAIN_CUDA_GRAPH: ClassVar[bool] = True  # docs/cuda-graph-training-parity.json

    # The reference recipe: AdamW, lr 1e-4, weight decay 1e-4 (its layer-wise backbone decay and
    # EMA are not modelled).
    TRAIN_DEFAULTS: ClassVar[dict[str, object]] = {
        "optimizer": "AdamW", "lr0": 1e-4, "momentum": 0.9, "weight_decay": 1e-4, "mosaic": 0.0,
        "warmup_bias_lr": 0.0,
    }

    @classmethod
    def build_net(cls, *, size: str, nc: int, task: str) -> nn.Module:
        from .nn import build_lw_detr

        return build_lw_detr(size=size, nc=nc)

    def build_criterion(self) -> Any:
        from .._detr.lwdetr import GroupTrainLoss

        return GroupTrainLoss(self.net)
