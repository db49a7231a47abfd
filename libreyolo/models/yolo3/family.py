"""YOLOv3 detection family: sizes ``b`` (the paper's YOLOv3-416), ``spp`` (YOLOv3-SPP) and ``tiny``
(YOLOv3-tiny), weights ``LibreYOLO3b.pt``, ``LibreYOLO3spp.pt``, ``LibreYOLO3tiny.pt``."""

from __future__ import annotations

from typing import ClassVar

from torch import nn

from .._darknet.family import DarknetFamily, OutputNames
from .nn import IMGSZ, SIZES


class YOLO3(DarknetFamily):
    """YOLOv3 (arXiv:1804.02767): Darknet-53, three scales, three anchors per scale; GIoU box loss,
    best-anchor assignment with the 0.5 ignore threshold (see ``README.md``)."""

    FAMILY: ClassVar[str] = "yolo3"
    INFER_CHANNELS_LAST: ClassVar[bool] = True  # benchmarks/results/layout/layout_predict.json (f71707c): graph step cl / nchw below 0.97
    SUPPORTS_TRAIN_CUDA_GRAPH: ClassVar[bool] = True  # docs/cuda-graph-training-parity.json
    NAME_TOKEN: ClassVar[str] = "YOLO3"
    SIZES: ClassVar[tuple[str, ...]] = SIZES
    OUTPUT_NAMES = OutputNames(("raw_p4", "raw_p5"))  # type: ignore[assignment]  # the first size (tiny): 2 levels
    DEFAULT_IMGSZ: ClassVar[int] = IMGSZ
    BOX_LOSS: ClassVar[str] = "giou"

    @classmethod
    def build_net(cls, *, size: str, nc: int, task: str) -> nn.Module:
        from .nn import build_yolo3

        return build_yolo3(size=size, nc=nc)
