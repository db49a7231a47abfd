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
    SUPPORTS_TRAIN_CUDA_GRAPH: ClassVar[bool] = False
    TRAIN_CUDA_GRAPH_REASON: ClassVar[str] = (
        "convnext-tiny's stochastic depth draws from the graph's own RNG stream, so its step-zero loss "
        "differs from eager (docs/cuda-graph-training-parity.json; atto, without it, is exact); the capture "
        "restores the RNG since 45c0b06, a re-run is pending"
    )

    @classmethod
    def build_net(cls, *, size: str, nc: int, task: str) -> nn.Module:
        from .nn import build_convnext

        return build_convnext(size=size, nc=nc)
