"""YOLOv7 detection family: sizes tiny, b and x (the paper's YOLOv7-tiny, YOLOv7, YOLOv7-X).

Weights names: ``LibreYOLO7tiny.pt``, ``LibreYOLO7b.pt``, ``LibreYOLO7x.pt``.
"""

from __future__ import annotations

from typing import Any, ClassVar

from torch import Tensor, nn

from .._base.family import Family


class YOLO7(Family):
    FAMILY: ClassVar[str] = "yolo7"
    NAME_TOKEN: ClassVar[str] = "YOLO7"
    TASKS: ClassVar[tuple[str, ...]] = ("detect",)
    SIZES: ClassVar[tuple[str, ...]] = ("tiny", "b", "x")
    DEFAULT_IMGSZ: ClassVar[int] = 640
    STRIDE: ClassVar[int] = 32
    LOSS_NAMES: ClassVar[tuple[str, ...]] = ("box", "obj", "cls")
    OUTPUT_NAMES: ClassVar[tuple[str, ...]] = ("raw_p3", "raw_p4", "raw_p5")  # strides 8, 16, 32
    EXPORT_DYNAMIC_AXES: ClassVar[tuple[str, ...]] = ("batch", "height", "width")

    SUPPORTS_CUDA_GRAPH: ClassVar[bool] = True  # docs/cuda-graph-parity.json
    SUPPORTS_TRAIN_CUDA_GRAPH: ClassVar[bool] = True  # docs/cuda-graph-training-parity.json

    @classmethod
    def build_net(cls, *, size: str, nc: int, task: str) -> nn.Module:
        from .nn import build_yolo7

        return build_yolo7(size=size, nc=nc)

    def postprocess(self, raw: Any, *, conf: float, iou: float, classes: list[int] | None,
                    max_det: int, agnostic: bool) -> list[Tensor]:
        from .postprocess import postprocess

        return postprocess(raw, net=self.net, conf=conf, iou=iou, classes=classes, max_det=max_det,
                           agnostic=agnostic)

    def build_criterion(self) -> Any:
        from .loss import YOLO7Loss
        from .variants import VARIANTS

        v = VARIANTS[self.size]
        return YOLO7Loss(self.net, box=v.box, obj=v.obj, cls=v.cls)
