"""FOMO point (object-centroid) family: sizes 035, 100 (``LibreFOMO<size>-point.pt``), the
MobileNetV2 width multiplier x 100."""

from __future__ import annotations

from typing import ClassVar

from torch import nn

from .._base.point import PointFamily


class FOMO(PointFamily):
    FAMILY: ClassVar[str] = "fomo"
    SUPPORTS_CUDA_GRAPH: ClassVar[bool] = True  # docs/cuda-graph-parity.json (360bf40: every row bitwise)
    SUPPORTS_TRAIN_CUDA_GRAPH: ClassVar[bool] = True  # docs/cuda-graph-training-parity.json (360bf40)
    NAME_TOKEN: ClassVar[str] = "FOMO"  # LibreFOMO<size>-point.pt
    SIZES: ClassVar[tuple[str, ...]] = ("035", "100")
    DEFAULT_IMGSZ: ClassVar[int] = 320
    # Edge Impulse trains FOMO with Adam at lr 1e-3; AdamW without weight decay is the nearest optimiser here
    TRAIN_DEFAULTS: ClassVar[dict[str, object]] = {"optimizer": "AdamW", "lr0": 1e-3, "momentum": 0.9,
                                                   "weight_decay": 0.0, "warmup_bias_lr": 0.0}

    @classmethod
    def build_net(cls, *, size: str, nc: int, task: str) -> nn.Module:
        from .nn import build_fomo

        return build_fomo(size=size, nc=nc)
