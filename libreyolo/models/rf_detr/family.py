"""RF-DETR detection family: sizes nano, small, medium, large and base; weights ``LibreRFDETRnano.pt``."""

from __future__ import annotations

from typing import Any, ClassVar

from torch import nn

from .._detr.family import EncoderDecoderFamily


class RFDETR(EncoderDecoderFamily):
    """RF-DETR (arXiv:2511.09554): DINOv2 ViT-S with windowed attention, LayerNorm C2f
    projector to one stride-16 map, two-stage Group-DETR queries, 2-4 deformable decoder layers; no NMS.

    Seam (SPEC G-9), as the other DETRs: prediction = backbone+projector, then decoder+heads (both
    capturable); training = backbone+projector (capturable), then the 13-group decoder + Hungarian
    criterion (eager). Flags stay ``False`` until GPU parity rows exist.
    """

    FAMILY: ClassVar[str] = "rf_detr"
    NAME_TOKEN: ClassVar[str] = "RFDETR"
    SIZES: ClassVar[tuple[str, ...]] = ("nano", "small", "medium", "large", "base")
    STRIDE: ClassVar[int] = 32  # 16 px patches x 2 windows per side (base: the ``stride`` property, 56)
    DEFAULT_IMGSZ: ClassVar[int] = 512  # small; nano 384, medium 576, large 704
    LOSS_NAMES: ClassVar[tuple[str, ...]] = ("focal", "l1", "giou")

    SUPPORTS_CUDA_GRAPH: ClassVar[bool] = True  # docs/cuda-graph-parity.json (6ceda2f)
    SUPPORTS_TRAIN_CUDA_GRAPH: ClassVar[bool] = False
    TRAIN_CUDA_GRAPH_REASON: ClassVar[str] = ("docs/cuda-graph-training-parity.json (e1c602a): the base size's rows "
                                              "pass the loss but not the updated weights bit for bit")

    # The reference recipe: AdamW, lr 1e-4, weight decay 1e-4 (its layer-wise backbone decay and
    # EMA are not modelled).
    TRAIN_DEFAULTS: ClassVar[dict[str, object]] = {
        "optimizer": "AdamW", "lr0": 1e-4, "momentum": 0.9, "weight_decay": 1e-4, "mosaic": 0.0,
        "warmup_bias_lr": 0.0,
    }

    @property
    def stride(self) -> int:
        """Input sides must be multiples of patch x windows per side: 32 (base: 14 x 4 = 56)."""
        cfg = getattr(self.net, "cfg", None)
        return int(cfg.patch * cfg.windows) if cfg is not None else self.STRIDE

    @classmethod
    def build_net(cls, *, size: str, nc: int, task: str) -> nn.Module:
        from .nn import build_rf_detr

        return build_rf_detr(size=size, nc=nc)

    def build_criterion(self) -> Any:
        from .._detr.lwdetr import GroupTrainLoss

        return GroupTrainLoss(self.net)
