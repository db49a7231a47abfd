"""YOLOv7 detection family: sizes tiny, b and x (the paper's YOLOv7-tiny, YOLOv7, YOLOv7-X).

Weights names: ``LibreYOLO7tiny.pt``, ``LibreYOLO7b.pt``, ``LibreYOLO7x.pt``.
"""

from __future__ import annotations

from typing import Any, ClassVar

from torch import nn

from .._base.dense import DenseFamily


class YOLO7(DenseFamily):
    FAMILY: ClassVar[str] = "yolo7"
    NAME_TOKEN: ClassVar[str] = "YOLO7"
    SIZES: ClassVar[tuple[str, ...]] = ("tiny", "b", "x")
    LOSS_NAMES: ClassVar[tuple[str, ...]] = ("box", "obj", "cls")

    SUPPORTS_CUDA_GRAPH: ClassVar[bool] = True  # docs/cuda-graph-parity.json
    SUPPORTS_TRAIN_CUDA_GRAPH: ClassVar[bool] = True  # docs/cuda-graph-training-parity.json

    @classmethod
    def build_net(cls, *, size: str, nc: int, task: str) -> nn.Module:
        from .nn import build_yolo7

        return build_yolo7(size=size, nc=nc)

    def build_criterion(self) -> Any:
        from .loss import YOLO7Loss
        from .variants import VARIANTS

        v = VARIANTS[self.size]
        return YOLO7Loss(self.net, box=v.box, obj=v.obj, cls=v.cls)
