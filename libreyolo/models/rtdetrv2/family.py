"""RT-DETRv2 detection family: sizes r18, r34 (weights ``LibreRTDETRv2<size>.pt``)."""

from __future__ import annotations

from typing import Any, ClassVar

from torch import nn

from .._detr.family import EncoderDecoderFamily


class RTDETRv2(EncoderDecoderFamily):
    """RT-DETRv2 (arXiv:2407.17140): RT-DETR with per-level sampling points and an optional discrete sampling operator in the decoder (see README)."""

    FAMILY: ClassVar[str] = "rtdetrv2"
    NAME_TOKEN: ClassVar[str] = "RTDETRv2"
    SIZES: ClassVar[tuple[str, ...]] = ("r18", "r34")

    SUPPORTS_CUDA_GRAPH: ClassVar[bool] = True  # docs/cuda-graph-parity.json
    INFER_CHANNELS_LAST: ClassVar[bool] = True  # benchmarks/results/layout/layout_predict.json (f71707c): graph step cl / nchw below 0.97
    GRAPH_BIAS_ACT: ClassVar[bool] = True  # benchmarks/results/layout/layout_predict.json (f71707c); parity rows regenerated with it
    SUPPORTS_TRAIN_CUDA_GRAPH: ClassVar[bool] = True  # docs/cuda-graph-training-parity.json (seam: trunk captured)

    @classmethod
    def build_net(cls, *, size: str, nc: int, task: str) -> nn.Module:
        from .nn import build_rtdetrv2

        return build_rtdetrv2(size=size, nc=nc)

    def build_criterion(self) -> Any:
        from .loss import build_rtdetrv2_loss

        return build_rtdetrv2_loss(self.net)
