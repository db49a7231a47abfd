"""YOLOv9 instance-segmentation family (task ``segment``): the GELAN detector with a prototype
mask branch; sizes t, s, c. Weights names: ``LibreYOLO9seg<size>-seg.pt``."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any, ClassVar

from torch import Tensor, nn

from .._gelan.family import BoxGroupsArch, GELANFamily


class YOLO9Seg(BoxGroupsArch, GELANFamily):
    FAMILY: ClassVar[str] = "yolo9_seg"
    NAME_TOKEN: ClassVar[str] = "YOLO9seg"
    TASKS: ClassVar[tuple[str, ...]] = ("segment",)
    OUTPUT_KIND: ClassVar[str] = "masks"  # postprocess: Tensor[n, 6 + nm] per image; masks in the task
    SIZES: ClassVar[tuple[str, ...]] = ("t", "s", "c")
    LOSS_NAMES: ClassVar[tuple[str, ...]] = ("box", "seg", "cls", "dfl")
    OUTPUT_NAMES: ClassVar[tuple[str, ...]] = ("raw_p3", "raw_p4", "raw_p5", "proto")
    DECODE_TOPK: ClassVar[int] = 0  # no captured decode: the coefficients travel with the eager NMS
    SUPPORTS_CUDA_GRAPH: ClassVar[bool] = True  # docs/cuda-graph-parity.json (360bf40: every row bitwise)
    INFER_CHANNELS_LAST: ClassVar[bool] = True  # benchmarks/results/layout/layout_predict.json (f71707c): graph step cl / nchw below 0.97
    GRAPH_BIAS_ACT: ClassVar[bool] = True  # benchmarks/results/layout/layout_predict.json (f71707c); parity rows regenerated with it
    SUPPORTS_TRAIN_CUDA_GRAPH: ClassVar[bool] = True  # docs/cuda-graph-training-parity.json (360bf40)

    @classmethod
    def build_net(cls, *, size: str, nc: int, task: str, box_groups: int = 4) -> nn.Module:
        from .nn import build_yolo9_seg

        return build_yolo9_seg(size=size, nc=nc, box_groups=box_groups)

    @classmethod
    def postprocess_fn(cls) -> Callable[..., list[Tensor]]:
        """Detections with their mask coefficients (:func:`.postprocess.postprocess`)."""
        from .postprocess import postprocess

        return postprocess

    def build_criterion(self) -> Any:
        from .loss import YOLO9SegLoss

        return YOLO9SegLoss(self.net)

    def masks(self, proto: Tensor, det: Tensor, *, input_hw: tuple[int, int]) -> Tensor:
        """One image's masks at the prototype resolution (:func:`.postprocess.assemble_masks`)."""
        from .postprocess import assemble_masks

        return assemble_masks(proto, det, input_hw=input_hw)
