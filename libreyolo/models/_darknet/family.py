"""The family base of the Darknet lineage (yolo3, yolo4): anchor-based dense detectors whose
network returns one ``Tensor[B, na * (5 + nc), h, w]`` per level of ``net.strides``, decoded by
:mod:`.postprocess` (found beside this class) and trained with :class:`.loss.AnchorYOLOLoss`."""

from __future__ import annotations

from typing import Any, ClassVar

from torch import Tensor

from .._base.dense import DenseFamily


class DarknetFamily(DenseFamily):
    """Shared hooks: the captured decode (network + decode in one prediction graph, only
    thresholding and NMS eager) and the criterion, configured by the ClassVars below."""

    LOSS_NAMES: ClassVar[tuple[str, ...]] = ("box", "obj", "cls")
    DECODE_TOPK: ClassVar[int] = 1000
    CUDA_GRAPH_REASON: ClassVar[str] = "no bitwise parity run recorded yet (benchmarks/manifest.yaml lists it)"
    TRAIN_CUDA_GRAPH_REASON: ClassVar[str] = "no training-capture parity run recorded yet"
    BOX_LOSS: ClassVar[str] = "giou"  # "giou" or "ciou"
    ASSIGN_THRESH: ClassVar[float | None] = None  # also assign every anchor with shape-IoU above it
    IGNORE_THRESH: ClassVar[float] = 0.5

    def decode(self, raw: Any) -> Tensor:
        from .postprocess import decode, make_grid

        feats = list(raw)
        return decode(feats, net=self.net, k=self.DECODE_TOPK, grids=self._per_level("grid", feats, make_grid))

    def build_criterion(self) -> Any:
        from .loss import AnchorYOLOLoss

        return AnchorYOLOLoss(self.net, box_loss=self.BOX_LOSS, assign_thresh=self.ASSIGN_THRESH,  # type: ignore[arg-type]
                              ignore_thresh=self.IGNORE_THRESH)
