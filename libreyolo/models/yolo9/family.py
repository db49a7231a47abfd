"""YOLOv9 (GELAN) detection family: sizes t, s, m, c."""

from __future__ import annotations

from typing import ClassVar

from torch import nn

from .._gelan.family import BoxGroupsArch, GELANFamily


class YOLO9(BoxGroupsArch, GELANFamily):
    FAMILY: ClassVar[str] = "yolo9"
    NAME_TOKEN: ClassVar[str] = "YOLO9"
    SIZES: ClassVar[tuple[str, ...]] = ("t", "s", "m", "c")
    SUPPORTS_CUDA_GRAPH: ClassVar[bool] = True  # docs/cuda-graph-parity.json
    SUPPORTS_TRAIN_CUDA_GRAPH: ClassVar[bool] = True  # docs/cuda-graph-training-parity.json
    INFER_CHANNELS_LAST: ClassVar[bool] = True  # benchmarks/results/peer (graph step fp16 and fp32)
    GRAPH_BIAS_ACT: ClassVar[bool] = True  # docs/cuda-graph-parity.json rows of yolo9 (regenerated with it)

    @classmethod
    def build_net(cls, *, size: str, nc: int, task: str, box_groups: int = 4) -> nn.Module:
        from .nn import build_yolo9

        return build_yolo9(size=size, nc=nc, box_groups=box_groups)
