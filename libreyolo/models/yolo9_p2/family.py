"""YOLOv9-P2 detection family: YOLOv9 (GELAN) with a fourth, stride-4 output level for small
objects; sizes t, s. Weights names: ``LibreYOLO9p2t.pt``, ``LibreYOLO9p2s.pt``."""

from __future__ import annotations

from typing import ClassVar

from torch import nn

from .._gelan.family import BoxGroupsArch, GELANFamily


class YOLO9P2(BoxGroupsArch, GELANFamily):
    FAMILY: ClassVar[str] = "yolo9_p2"
    NAME_TOKEN: ClassVar[str] = "YOLO9p2"
    SIZES: ClassVar[tuple[str, ...]] = ("t", "s")
    OUTPUT_NAMES: ClassVar[tuple[str, ...]] = ("raw_p2", "raw_p3", "raw_p4", "raw_p5")  # strides 4, 8, 16, 32
    SUPPORTS_CUDA_GRAPH: ClassVar[bool] = True  # docs/cuda-graph-parity.json (2ec587a: 4/4 bitwise)
    INFER_CHANNELS_LAST: ClassVar[bool] = True  # benchmarks/results/layout/layout_predict.json (f71707c): graph step cl / nchw below 0.97
    GRAPH_BIAS_ACT: ClassVar[bool] = True  # benchmarks/results/layout/layout_predict.json (f71707c); parity rows regenerated with it
    SUPPORTS_TRAIN_CUDA_GRAPH: ClassVar[bool] = True  # docs/cuda-graph-training-parity.json (2ec587a: 4/4)

    @classmethod
    def build_net(cls, *, size: str, nc: int, task: str, box_groups: int = 4) -> nn.Module:
        from .nn import build_yolo9_p2

        return build_yolo9_p2(size=size, nc=nc, box_groups=box_groups)
