"""YOLOX detection family: sizes nano, tiny, s, m, l, x (weights ``LibreYOLOX<size>.pt``)."""

from __future__ import annotations

import logging
from typing import Any, ClassVar

from torch import Tensor, nn

from .._base.dense import DenseFamily
from .variants import VARIANTS

logger = logging.getLogger(__name__)


class YOLOX(DenseFamily):
    """YOLOX (arXiv:2107.08430). Default input size is per size: 416 for nano and tiny, 640
    otherwise (``DEFAULT_IMGSZ`` is the 640 of the larger sizes; :meth:`default_imgsz` gives the
    per-size value, which ``__init__`` uses when ``imgsz`` is not given).

    Training hook: :meth:`on_close_mosaic` switches the criterion's L1 loss on for the last
    no-augmentation epochs, as the reference recipe does.
    """

    FAMILY: ClassVar[str] = "yolox"
    NAME_TOKEN: ClassVar[str] = "YOLOX"
    SIZES: ClassVar[tuple[str, ...]] = ("nano", "tiny", "s", "m", "l", "x")
    LOSS_NAMES: ClassVar[tuple[str, ...]] = ("iou", "obj", "cls", "l1")

    SUPPORTS_CUDA_GRAPH: ClassVar[bool] = True  # docs/cuda-graph-parity.json
    SUPPORTS_TRAIN_CUDA_GRAPH: ClassVar[bool] = True  # docs/cuda-graph-training-parity.json
    DECODE_TOPK: ClassVar[int] = 1000
    # half=True: channels-last with the fused epilogue (fp32 stays NCHW without it): eager fp16 NCHW was
    # 1.42x (batch 8) fp32 (benchmarks/results/peer/families); graph fp16 cl_ba / nchw 0.96 (layout/ba)
    HALF_CHANNELS_LAST: ClassVar[bool | None] = True
    GRAPH_BIAS_ACT: ClassVar[bool | str] = "channels_last"

    def __init__(
        self,
        *,
        size: str,
        task: str = "detect",
        nc: int = 80,
        names: dict[int, str] | list[str] | None = None,
        imgsz: int | None = None,
    ) -> None:
        if imgsz is None and size in VARIANTS:
            imgsz = VARIANTS[size].imgsz
        super().__init__(size=size, task=task, nc=nc, names=names, imgsz=imgsz)

    @classmethod
    def default_imgsz(cls, size: str) -> int:
        """The reference input size of ``size`` (416 for nano/tiny, 640 otherwise)."""
        v = VARIANTS.get(size)
        return v.imgsz if v is not None else cls.DEFAULT_IMGSZ

    @classmethod
    def build_net(cls, *, size: str, nc: int, task: str) -> nn.Module:
        from .nn import build_yolox

        return build_yolox(size=size, nc=nc)

    def decode(self, raw: Any) -> Tensor:
        from .postprocess import decode, make_grid

        feats = list(raw)
        return decode(feats, net=self.net, k=self.DECODE_TOPK, grid=self._per_level("grid", feats, make_grid))

    def build_criterion(self) -> Any:
        from .loss import YOLOXLoss

        return YOLOXLoss(self.net)

    def on_close_mosaic(self, criterion: Any) -> None:
        """Trainer hook, called when strong augmentation (mosaic) is switched off for the last
        epochs: enables the L1 loss on raw box outputs (``criterion.use_l1 = True``).

        The network and its outputs do not change, so captured training graphs stay valid;
        only the eager criterion computes one more term.
        """
        if not getattr(criterion, "use_l1", True):
            logger.info("yolox: L1 box loss enabled for the no-augmentation epochs")
        criterion.use_l1 = True
