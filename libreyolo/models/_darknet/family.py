"""The family base of the Darknet lineage (yolo3, yolo4): anchor-based dense detectors whose
network returns one ``Tensor[B, na * (5 + nc), h, w]`` per level of ``net.strides``, decoded by
:mod:`.postprocess` (found beside this class) and trained with :class:`.loss.AnchorYOLOLoss`."""

from __future__ import annotations

from typing import Any, ClassVar

from torch import Tensor

from .._base.dense import DenseFamily

_LEVEL_NAMES = {8: "raw_p3", 16: "raw_p4", 32: "raw_p5"}


class OutputNames:
    """``OUTPUT_NAMES`` that follows the size: on the class, the names of the first size's levels
    (given by the family; what the contract tests read); on an instance, one name per level of
    its network (the tiny sizes have two levels, strides 16 and 32; the others three)."""

    def __init__(self, default: tuple[str, ...]) -> None:
        self.default = default

    def __get__(self, obj: Any, cls: type | None = None) -> tuple[str, ...]:
        if obj is None or "net" not in getattr(obj, "__dict__", {}):
            return self.default
        return tuple(_LEVEL_NAMES[int(s)] for s in obj.net.strides)


class DarknetFamily(DenseFamily):
    """Shared hooks: the captured decode (network + decode in one prediction graph, only
    thresholding and NMS eager) and the criterion, configured by the ClassVars below."""

    LOSS_NAMES: ClassVar[tuple[str, ...]] = ("box", "obj", "cls")
    OUTPUT_NAMES = OutputNames(("raw_p3", "raw_p4", "raw_p5"))  # type: ignore[assignment]
    SIZE_IMGSZ: ClassVar[dict[str, int]] = {}  # default input size of the sizes that differ from DEFAULT_IMGSZ
    DECODE_TOPK: ClassVar[int] = 1000
    CUDA_GRAPH_REASON: ClassVar[str] = ("docs/cuda-graph-parity.json (e1c602a): yolo3 b/spp and yolo4 b overflow to "
                                        "inf in float16 (random-init eager output is not even deterministic there)")
    TRAIN_CUDA_GRAPH_REASON: ClassVar[str] = "no training-capture parity run recorded yet"
    BOX_LOSS: ClassVar[str] = "giou"  # "giou" or "ciou"
    ASSIGN_THRESH: ClassVar[float | None] = None  # also assign every anchor with shape-IoU above it
    IGNORE_THRESH: ClassVar[float] = 0.5

    def __init__(self, *, size: str, task: str | None = None, nc: int = 80,
                 names: dict[int, str] | list[str] | None = None, imgsz: int | None = None) -> None:
        if imgsz is None:
            imgsz = self.SIZE_IMGSZ.get(size)
        super().__init__(size=size, task=task, nc=nc, names=names, imgsz=imgsz)

    @classmethod
    def default_imgsz(cls, size: str) -> int:
        """The reference input size of ``size``."""
        return cls.SIZE_IMGSZ.get(size, cls.DEFAULT_IMGSZ)

    def decode(self, raw: Any) -> Tensor:
        from .postprocess import decode, make_grid

        feats = list(raw)
        return decode(feats, net=self.net, k=self.DECODE_TOPK, grids=self._per_level("grid", feats, make_grid))

    def build_criterion(self) -> Any:
        from .loss import AnchorYOLOLoss

        return AnchorYOLOLoss(self.net, box_loss=self.BOX_LOSS, assign_thresh=self.ASSIGN_THRESH,  # type: ignore[arg-type]
                              ignore_thresh=self.IGNORE_THRESH)
