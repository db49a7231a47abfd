"""YOLOv2 detection family: size ``b`` (the paper's YOLOv2 at 416), weights ``LibreYOLO2b.pt``."""

from __future__ import annotations

from typing import ClassVar

from torch import nn

from .._darknet.family import DarknetFamily, OutputNames
from .nn import IMGSZ, SIZES


class YOLO2(DarknetFamily):
    """YOLOv2 (arXiv:1612.08242): Darknet-19 + passthrough, one stride-32 level with five anchors,
    softmax classes; GIoU box loss, best-anchor assignment, ignore threshold 0.6 (the cfg's
    ``thresh``)."""

    FAMILY: ClassVar[str] = "yolo2"
    SUPPORTS_TRAIN_CUDA_GRAPH: ClassVar[bool] = True  # docs/cuda-graph-training-parity.json
    SUPPORTS_CUDA_GRAPH: ClassVar[bool] = True  # docs/cuda-graph-parity.json
    INFER_CHANNELS_LAST: ClassVar[bool] = True  # benchmarks/results/layout/layout_predict.json (f71707c): graph step cl / nchw below 0.97
    NAME_TOKEN: ClassVar[str] = "YOLO2"
    SIZES: ClassVar[tuple[str, ...]] = SIZES
    DEFAULT_IMGSZ: ClassVar[int] = IMGSZ
    OUTPUT_NAMES = OutputNames(("raw_p5",))  # type: ignore[assignment]  # one level, stride 32
    BOX_LOSS: ClassVar[str] = "giou"
    IGNORE_THRESH: ClassVar[float] = 0.6

    @classmethod
    def build_net(cls, *, size: str, nc: int, task: str) -> nn.Module:
        from .nn import build_yolo2

        return build_yolo2(size=size, nc=nc)
