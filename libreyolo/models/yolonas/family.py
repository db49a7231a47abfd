"""YOLO-NAS detection family: sizes s, m, l (weights ``LibreYOLONAS<size>.pt``)."""

from __future__ import annotations

from typing import Any, ClassVar

from torch import Tensor, nn

from .._base.dense import DenseFamily


class YOLONAS(DenseFamily):
    """YOLO-NAS (Deci, 2023; super-gradients): QARepVGG backbone with CSP ``YoloNASStage``
    stages and SPP, a PAN neck of ``YoloNASUpStage`` / ``YoloNASDownStage``, per-level NDFL
    heads (distribution focal boxes, 17 bins). :meth:`fuse` (done by ``predict``) merges every
    QARepVGG block into one 3x3 conv.

    Example:
        >>> model = YOLONAS(size="s", nc=80)
        >>> 12.5e6 < model.info()["params"] < 13.2e6  # unfused; fused 12.17M (published 12.18M)
        True
    """

    FAMILY: ClassVar[str] = "yolonas"
    SUPPORTS_TRAIN_CUDA_GRAPH: ClassVar[bool] = True  # docs/cuda-graph-training-parity.json
    NAME_TOKEN: ClassVar[str] = "YOLONAS"
    SIZES: ClassVar[tuple[str, ...]] = ("s", "m", "l")
    LOSS_NAMES: ClassVar[tuple[str, ...]] = ("box", "cls", "dfl")
    DECODE_TOPK: ClassVar[int] = 1000  # upstream's num_pre_nms_predictions

    SUPPORTS_CUDA_GRAPH: ClassVar[bool] = True  # docs/cuda-graph-parity.json (58331d9: every row bitwise)
    INFER_CHANNELS_LAST: ClassVar[bool] = True  # benchmarks/results/layout/layout_predict.json (f71707c): graph step cl / nchw below 0.97
    # With randomised BatchNorm statistics the untrained probe model's output barely depends on its
    # input (largest difference between the two parity probes 3e-3 for s at 320 px, below fp16's
    # resolution at the outputs' magnitude); calibrated statistics give differences of 3 (s) to 24 (l).
    PARITY_NORM_STATS: ClassVar[str] = "calibrated"

    @classmethod
    def build_net(cls, *, size: str, nc: int, task: str) -> nn.Module:
        from .nn import build_yolonas

        return build_yolonas(size=size, nc=nc)

    def decode(self, raw: Any) -> Tensor:
        from ...ops.anchors import make_anchors
        from .postprocess import decode

        feats = list(raw)
        return decode(feats, net=self.net, k=self.DECODE_TOPK, anchors=self._per_level("anchors", feats, make_anchors))

    def build_criterion(self) -> Any:
        from .loss import YOLONASLoss

        return YOLONASLoss(self.net)
