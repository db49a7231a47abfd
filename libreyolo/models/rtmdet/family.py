"""RTMDet detection family: sizes t, s, m, l, x (weights ``LibreRTMDet<size>.pt``)."""

from __future__ import annotations

from typing import Any, ClassVar

from torch import Tensor, nn

from .._base.dense import DenseFamily


class RTMDet(DenseFamily):
    """RTMDet (arXiv:2212.07784): CSPNeXt backbone, CSPNeXt-PAFPN neck, shared-conv head with a
    BatchNorm per level; trained with dynamic soft label assignment, Quality Focal Loss and GIoU.

    Example:
        >>> model = RTMDet(size="t", nc=80)
        >>> model.info()["params"] > 4_000_000
        True
    """

    FAMILY: ClassVar[str] = "rtmdet"
    NAME_TOKEN: ClassVar[str] = "RTMDet"
    SIZES: ClassVar[tuple[str, ...]] = ("t", "s", "m", "l", "x")
    LOSS_NAMES: ClassVar[tuple[str, ...]] = ("cls", "box")

    SUPPORTS_CUDA_GRAPH: ClassVar[bool] = True  # docs/cuda-graph-parity.json
    SUPPORTS_TRAIN_CUDA_GRAPH: ClassVar[bool] = True  # docs/cuda-graph-training-parity.json
    DECODE_TOPK: ClassVar[int] = 1000
    # half=True: channels-last with the fused epilogue (fp32 stays NCHW without it): eager fp16 NCHW was
    # 1.06-1.08x fp32 (benchmarks/results/peer/families); graph fp16 cl_ba / nchw 0.98 (layout/ba)
    HALF_CHANNELS_LAST: ClassVar[bool | None] = True
    GRAPH_BIAS_ACT: ClassVar[bool | str] = "channels_last"

    @classmethod
    def build_net(cls, *, size: str, nc: int, task: str) -> nn.Module:
        from .nn import build_rtmdet

        return build_rtmdet(size=size, nc=nc)

    def decode(self, raw: Any) -> Tensor:
        from .postprocess import decode, grid_points

        feats = list(raw)
        return decode(feats, net=self.net, k=self.DECODE_TOPK, grid=self._per_level("grid", feats, grid_points))

    def build_criterion(self) -> Any:
        from .loss import RTMDetLoss

        return RTMDetLoss(self.net)
