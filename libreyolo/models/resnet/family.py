"""ResNet classification family: sizes 18, 50."""

from __future__ import annotations

from typing import ClassVar

from torch import nn

from .._base.classify import ClassifyFamily


class ResNet(ClassifyFamily):
    FAMILY: ClassVar[str] = "resnet"
    NAME_TOKEN: ClassVar[str] = "ResNet"  # LibreResNet<size>-cls.pt
    SIZES: ClassVar[tuple[str, ...]] = ("18", "50")
    SUPPORTS_CUDA_GRAPH: ClassVar[bool] = True  # docs/cuda-graph-parity.json
    INFER_CHANNELS_LAST: ClassVar[bool] = True  # benchmarks/results/layout/layout_predict.json (f71707c): graph step cl / nchw below 0.97
    SUPPORTS_TRAIN_CUDA_GRAPH: ClassVar[bool] = True  # docs/cuda-graph-training-parity.json

    @classmethod
    def build_net(cls, *, size: str, nc: int, task: str) -> nn.Module:
        from .nn import build_resnet

        return build_resnet(size=size, nc=nc)
