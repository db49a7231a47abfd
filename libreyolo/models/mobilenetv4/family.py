"""MobileNetV4 (conv) classification family: sizes conv_small."""

from __future__ import annotations

from typing import ClassVar

from torch import nn

from .._base.classify import ClassifyFamily


class MobileNetV4(ClassifyFamily):
    FAMILY: ClassVar[str] = "mobilenetv4"
    NAME_TOKEN: ClassVar[str] = "MobileNetV4"  # LibreMobileNetV4<size>-cls.pt
    SIZES: ClassVar[tuple[str, ...]] = ("conv_small",)
    SUPPORTS_CUDA_GRAPH: ClassVar[bool] = True  # docs/cuda-graph-parity.json
    SUPPORTS_TRAIN_CUDA_GRAPH: ClassVar[bool] = True  # docs/cuda-graph-training-parity.json

    @classmethod
    def build_net(cls, *, size: str, nc: int, task: str) -> nn.Module:
        from .nn import build_mobilenetv4

        return build_mobilenetv4(size=size, nc=nc)
