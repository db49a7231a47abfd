"""YOLOv9 (GELAN) detection family: sizes t, s, m, c."""

from __future__ import annotations

from typing import Any, ClassVar

from torch import Tensor, nn

from .._base.family import Family


class YOLO9(Family):
    FAMILY: ClassVar[str] = "yolo9"
    NAME_TOKEN: ClassVar[str] = "YOLO9"
    TASKS: ClassVar[tuple[str, ...]] = ("detect",)
    SIZES: ClassVar[tuple[str, ...]] = ("t", "s", "m", "c")
    DEFAULT_IMGSZ: ClassVar[int] = 640
    STRIDE: ClassVar[int] = 32
    LOSS_NAMES: ClassVar[tuple[str, ...]] = ("box", "cls", "dfl")
    OUTPUT_NAMES: ClassVar[tuple[str, ...]] = ("raw_p3", "raw_p4", "raw_p5")  # strides 8, 16, 32
    EXPORT_DYNAMIC_AXES: ClassVar[tuple[str, ...]] = ("batch", "height", "width")
    SUPPORTS_CUDA_GRAPH: ClassVar[bool] = True  # docs/cuda-graph-parity.json
    SUPPORTS_TRAIN_CUDA_GRAPH: ClassVar[bool] = True  # docs/cuda-graph-training-parity.json
    INFER_CHANNELS_LAST: ClassVar[bool] = True  # benchmarks/results/peer (graph step fp16 and fp32)
    DECODE_TOPK: ClassVar[int] = 1000

    @classmethod
    def build_net(cls, *, size: str, nc: int, task: str) -> nn.Module:
        from .nn import build_yolo9

        return build_yolo9(size=size, nc=nc)

    def postprocess(self, raw: Any, *, conf: float, iou: float, classes: list[int] | None,
                    max_det: int, agnostic: bool) -> list[Tensor]:
        from .postprocess import postprocess

        return postprocess(raw, net=self.net, conf=conf, iou=iou, classes=classes, max_det=max_det,
                           agnostic=agnostic)

    def decode(self, raw: Any) -> Tensor:
        from ...ops.anchors import make_anchors
        from .postprocess import decode

        feats = list(raw)
        return decode(feats, net=self.net, k=self.DECODE_TOPK, anchors=self._per_level("anchors", feats, make_anchors))

    def build_criterion(self) -> Any:
        from .loss import YOLO9Loss

        return YOLO9Loss(self.net)
