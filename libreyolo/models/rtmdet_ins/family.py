"""RTMDet-Ins instance-segmentation family (task ``segment``): the RTMDet detector with a mask
feature branch and per-point dynamic mask kernels; sizes t, s, m, l, x. Weights names:
``LibreRTMDetIns<size>-seg.pt``."""

from __future__ import annotations

from typing import Any, ClassVar

from torch import Tensor, nn

from .._base.dense import DenseFamily


class RTMDetIns(DenseFamily):
    """RTMDet-Ins (arXiv:2212.07784, section 3.4): the RTMDet network whose head also predicts,
    per grid point, the 169 parameters of a three-layer dynamic 1x1 convolution, and a mask-feature
    branch (8 channels at stride 8). The network (mask features and kernels included) is the
    capturable part; after NMS the kept detections' kernels run over the mask features eagerly
    (:meth:`masks`).

    Example:
        >>> model = RTMDetIns(size="t", nc=80)
        >>> round(model.info()["params"] / 1e6, 2)
        5.64
    """

    FAMILY: ClassVar[str] = "rtmdet_ins"
    NAME_TOKEN: ClassVar[str] = "RTMDetIns"
    TASKS: ClassVar[tuple[str, ...]] = ("segment",)
    OUTPUT_KIND: ClassVar[str] = "masks"  # postprocess: Tensor[n, 6 + 3 + 169] per image; masks in the task
    SIZES: ClassVar[tuple[str, ...]] = ("t", "s", "m", "l", "x")
    LOSS_NAMES: ClassVar[tuple[str, ...]] = ("cls", "box", "seg")
    OUTPUT_NAMES: ClassVar[tuple[str, ...]] = ("raw_p3", "raw_p4", "raw_p5", "mask_feat")
    # what the contract tests ask of a "masks" family whose layout differs from the prototype default
    MASK_FEAT_STRIDE: ClassVar[int] = 8  # the last output's stride (prototype families: 4)
    MASK_DET_COLUMNS: ClassVar[int] = 3 + 169  # columns after the 6 box columns (prototype families: nm)
    DECODE_TOPK: ClassVar[int] = 0  # no captured decode: the kernels travel with the eager NMS
    SUPPORTS_CUDA_GRAPH: ClassVar[bool] = True  # docs/cuda-graph-parity.json
    SUPPORTS_TRAIN_CUDA_GRAPH: ClassVar[bool] = True  # docs/cuda-graph-training-parity.json

    @classmethod
    def build_net(cls, *, size: str, nc: int, task: str) -> nn.Module:
        from .nn import build_rtmdet_ins

        return build_rtmdet_ins(size=size, nc=nc)

    def build_criterion(self) -> Any:
        from .loss import RTMDetInsLoss

        return RTMDetInsLoss(self.net)

    def masks(self, proto: Tensor, det: Tensor, *, input_hw: tuple[int, int]) -> Tensor:
        """One image's masks at a quarter of the input (:func:`.postprocess.assemble_masks`):
        proto (Tensor[8, H/8, W/8], the mask features), det (Tensor[n, 178]) -> Tensor[n, H/4, W/4]
        probabilities. ``input_hw`` is not needed: the geometry follows from the mask features."""
        from .postprocess import assemble_masks

        return assemble_masks(proto, det, feat_stride=int(self.net.strides[0]))
