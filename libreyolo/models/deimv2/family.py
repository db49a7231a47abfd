"""DEIMv2 detection family: sizes atto, femto, pico, n (weights ``LibreDEIMv2<size>.pt``)."""

from __future__ import annotations

from typing import Any, ClassVar

from torch import nn

from .._detr.deimv2_variants import VARIANTS
from .._detr.family import FDRFamily


class DEIMv2(FDRFamily):
    """DEIMv2 (arXiv:2509.20787), HGNetv2 sizes: HGNetv2, lite encoder (atto / femto / pico) or
    sum-fused hybrid encoder (n), FDR decoder with RMSNorm / SwiGLU layers; DEIM's matching and MAL; no NMS. Trains in
    full precision by default (``amp=False``)."""

    FAMILY: ClassVar[str] = "deimv2"
    NAME_TOKEN: ClassVar[str] = "DEIMv2"
    SIZES: ClassVar[tuple[str, ...]] = tuple(VARIANTS)
    DEFAULT_IMGSZ: ClassVar[int] = 320  # atto's evaluation size (femto: 416)
    LOSS_NAMES: ClassVar[tuple[str, ...]] = ("mal", "l1", "giou", "fgl", "ddf")

    SUPPORTS_CUDA_GRAPH: ClassVar[bool] = True  # docs/cuda-graph-parity.json
    SUPPORTS_TRAIN_CUDA_GRAPH: ClassVar[bool] = True  # docs/cuda-graph-training-parity.json

    # Reference recipe (deimv2_hgnetv2_atto_coco.yml: AdamW lr 2e-3, backbone 1e-3, weight decay 1e-4), fp32.
    TRAIN_DEFAULTS: ClassVar[dict[str, object]] = {
        "optimizer": "AdamW", "lr0": 2e-3, "momentum": 0.9, "weight_decay": 1e-4, "mosaic": 0.3, "amp": False,
        "warmup_bias_lr": 0.0,
    }

    @classmethod
    def build_net(cls, *, size: str, nc: int, task: str) -> nn.Module:
        from .nn import build_deimv2

        return build_deimv2(size=size, nc=nc)

    def build_criterion(self) -> Any:
        from .loss import build_deimv2_loss

        return build_deimv2_loss(self.net)
