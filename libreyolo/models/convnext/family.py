"""ConvNeXt classification family: sizes atto, tiny."""

from __future__ import annotations

from typing import ClassVar

from torch import nn

from .._base.classify import ClassifyFamily


class ConvNeXt(ClassifyFamily):
    FAMILY: ClassVar[str] = "convnext"
    NAME_TOKEN: ClassVar[str] = "ConvNeXt"  # LibreConvNeXt<size>-cls.pt
    SIZES: ClassVar[tuple[str, ...]] = ("atto", "tiny")
    SUPPORTS_CUDA_GRAPH: ClassVar[bool] = True  # docs/cuda-graph-parity.json
    INFER_CHANNELS_LAST: ClassVar[bool] = True  # benchmarks/results/layout/layout_predict.json (f71707c): graph step cl / nchw below 0.97
    SUPPORTS_TRAIN_CUDA_GRAPH: ClassVar[bool] = True  # docs/cuda-graph-training-parity.json (360bf40, after the capture's RNG restore)

    @classmethod
    def build_net(cls, *, size: str, nc: int, task: str) -> nn.Module:
        from .nn import build_convnext

        return build_convnext(size=size, nc=nc)
