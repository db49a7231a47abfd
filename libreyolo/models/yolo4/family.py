"""YOLOv4 detection family: sizes ``b`` (the paper's YOLOv4, 608 px) and ``tiny`` (YOLOv4-tiny,
416 px), weights ``LibreYOLO4b.pt``, ``LibreYOLO4tiny.pt``."""

from __future__ import annotations

from typing import ClassVar

from torch import nn

from .._darknet.family import DarknetFamily, OutputNames
from .nn import IMGSZ, SIZES, TINY_IMGSZ


class YOLO4(DarknetFamily):
    """YOLOv4 (arXiv:2004.10934): CSPDarknet53 + SPP + PANet; CIoU box loss, every anchor with
    shape-IoU > 0.213 assigned besides the best one (the cfg's ``iou_thresh``), ignore 0.5."""

    FAMILY: ClassVar[str] = "yolo4"
    INFER_CHANNELS_LAST: ClassVar[bool] = True  # benchmarks/results/layout/layout_predict.json (f71707c): graph step cl / nchw below 0.97
    SUPPORTS_TRAIN_CUDA_GRAPH: ClassVar[bool] = True  # docs/cuda-graph-training-parity.json
    NAME_TOKEN: ClassVar[str] = "YOLO4"
    SIZES: ClassVar[tuple[str, ...]] = SIZES
    OUTPUT_NAMES = OutputNames(("raw_p4", "raw_p5"))  # type: ignore[assignment]  # the first size (tiny): 2 levels
    DEFAULT_IMGSZ: ClassVar[int] = IMGSZ
    SIZE_IMGSZ: ClassVar[dict[str, int]] = {"tiny": TINY_IMGSZ}
    BOX_LOSS: ClassVar[str] = "ciou"
    ASSIGN_THRESH: ClassVar[float | None] = 0.213

    @classmethod
    def build_net(cls, *, size: str, nc: int, task: str) -> nn.Module:
        from .nn import build_yolo4

        return build_yolo4(size=size, nc=nc)
