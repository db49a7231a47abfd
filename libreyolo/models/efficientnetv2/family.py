"""EfficientNetV2 classification family: sizes b0, s."""

from __future__ import annotations

from typing import ClassVar

from torch import nn

from .._base.classify import ClassifyFamily


class EfficientNetV2(ClassifyFamily):
    FAMILY: ClassVar[str] = "efficientnetv2"
    NAME_TOKEN: ClassVar[str] = "EfficientNetV2"  # LibreEfficientNetV2<size>-cls.pt
    SIZES: ClassVar[tuple[str, ...]] = ("b0", "s")
    SUPPORTS_CUDA_GRAPH: ClassVar[bool] = True  # docs/cuda-graph-parity.json
    SUPPORTS_TRAIN_CUDA_GRAPH: ClassVar[bool] = True  # docs/cuda-graph-training-parity.json (360bf40, after the capture's RNG restore)

    @classmethod
    def build_net(cls, *, size: str, nc: int, task: str) -> nn.Module:
        from .nn import build_efficientnetv2

        return build_efficientnetv2(size=size, nc=nc)
