"""YOLOv9 end-to-end detection family: YOLOv9 (GELAN) with YOLOv10's one-to-one head, predicting
without NMS; sizes t, s. Weights names: ``LibreYOLO9e2et.pt``, ``LibreYOLO9e2es.pt``."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any, ClassVar

from torch import Tensor, nn

from .._gelan.family import GELANFamily


class YOLO9E2E(GELANFamily):
    FAMILY: ClassVar[str] = "yolo9_e2e"
    NAME_TOKEN: ClassVar[str] = "YOLO9e2e"
    SIZES: ClassVar[tuple[str, ...]] = ("t", "s")
    # one-to-one head first (the predicting head; validation scores it alone), then one-to-many
    LOSS_NAMES: ClassVar[tuple[str, ...]] = ("box", "cls", "dfl", "o2m_box", "o2m_cls", "o2m_dfl")
    SUPPORTS_CUDA_GRAPH: ClassVar[bool] = True  # docs/cuda-graph-parity.json (2ec587a: 4/4 bitwise)
    INFER_CHANNELS_LAST: ClassVar[bool] = True  # benchmarks/results/layout/layout_predict.json (f71707c): graph step cl / nchw below 0.97
    GRAPH_BIAS_ACT: ClassVar[bool] = True  # benchmarks/results/layout/layout_predict.json (f71707c); parity rows regenerated with it
    SUPPORTS_TRAIN_CUDA_GRAPH: ClassVar[bool] = True  # docs/cuda-graph-training-parity.json (2ec587a: 4/4)
    # The captured decode is the whole selection (top-k with k = the default max_det); only the
    # conf threshold runs after it, never NMS.
    DECODE_TOPK: ClassVar[int] = 300
    DECODE_NMS: ClassVar[bool] = False

    @classmethod
    def build_net(cls, *, size: str, nc: int, task: str) -> nn.Module:
        from .nn import build_yolo9_e2e

        return build_yolo9_e2e(size=size, nc=nc)

    @classmethod
    def postprocess_fn(cls) -> Callable[..., list[Tensor]]:
        from .postprocess import postprocess

        return postprocess

    def decode(self, raw: Any) -> Tensor:
        from ...ops.anchors import make_anchors
        from .postprocess import decode

        feats = list(raw)
        return decode(feats, net=self.net, k=self.DECODE_TOPK, anchors=self._per_level("anchors", feats, make_anchors))

    def build_criterion(self) -> Any:
        from .loss import E2ELoss

        return E2ELoss(self.net)
