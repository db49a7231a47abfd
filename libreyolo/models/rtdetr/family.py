"""RT-DETR detection family: sizes r18, r34, r50 (weights ``LibreRTDETR<size>.pt``)."""

from __future__ import annotations

from typing import Any, ClassVar

from torch import nn

from .._detr.family import EncoderDecoderFamily


class RTDETR(EncoderDecoderFamily):
    """RT-DETR (arXiv:2304.08069): ResNet-vd, hybrid encoder, deformable decoder, no NMS."""

    FAMILY: ClassVar[str] = "rtdetr"
    NAME_TOKEN: ClassVar[str] = "RTDETR"
    SIZES: ClassVar[tuple[str, ...]] = ("r18", "r34", "r50")

    SUPPORTS_CUDA_GRAPH: ClassVar[bool] = True  # docs/cuda-graph-parity.json
    SUPPORTS_TRAIN_CUDA_GRAPH: ClassVar[bool] = True  # docs/cuda-graph-training-parity.json (seam: trunk captured)
    INFER_CHANNELS_LAST: ClassVar[bool] = True  # benchmarks/results/peer (graph step fp16 and fp32)
    GRAPH_BIAS_ACT: ClassVar[bool] = True  # benchmarks/results/layout/layout_predict.json (f71707c); parity rows regenerated with it

    @classmethod
    def build_net(cls, *, size: str, nc: int, task: str) -> nn.Module:
        from .nn import build_rtdetr

        return build_rtdetr(size=size, nc=nc)

    def build_criterion(self) -> Any:
        from .loss import build_rtdetr_loss

        return build_rtdetr_loss(self.net)
