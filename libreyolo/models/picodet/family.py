"""PicoDet detection family: sizes s, m, l (weights ``LibrePicoDet<size>.pt``)."""

from __future__ import annotations

from typing import Any, ClassVar

from torch import Tensor, nn

from .._base.dense import DenseFamily
from .variants import VARIANTS


class PicoDet(DenseFamily):
    """PP-PicoDet (arXiv:2111.00902), the paper's models (PaddleDetection's 2021.10 "legacy"
    zoo): ESNet backbone, CSP-PAN neck with a stride-64 level, per-level depthwise-separable
    head with distribution (GFL) box regression; trained with SimOTA, Varifocal, GIoU and DFL
    losses. Default input size is per size: 320 for s, 416 for m, 640 for l.

    Example:
        >>> model = PicoDet(size="s", nc=80)
        >>> 0.96e6 < model.info()["params"] < 1.02e6  # published: 0.99M
        True
    """

    FAMILY: ClassVar[str] = "picodet"
    NAME_TOKEN: ClassVar[str] = "PicoDet"
    SIZES: ClassVar[tuple[str, ...]] = ("s", "m", "l")
    DEFAULT_IMGSZ: ClassVar[int] = 416
    STRIDE: ClassVar[int] = 32  # input multiple; the stride-64 level has ceil(H / 64) rows
    OUTPUT_NAMES: ClassVar[tuple[str, ...]] = ("raw_p3", "raw_p4", "raw_p5", "raw_p6")  # strides 8..64
    LOSS_NAMES: ClassVar[tuple[str, ...]] = ("vfl", "giou", "dfl")

    SUPPORTS_CUDA_GRAPH: ClassVar[bool] = True  # docs/cuda-graph-parity.json (6/6 with the calibrated probe: l 360bf40, s/m 58331d9)
    SUPPORTS_TRAIN_CUDA_GRAPH: ClassVar[bool] = True  # docs/cuda-graph-training-parity.json (cf0462e: 6/6 rows)
    # The default initialisation lets ESNet's signal fade: with randomised BatchNorm statistics the
    # untrained probe model's output does not depend on its input; parity probes calibrate them.
    PARITY_NORM_STATS: ClassVar[str] = "calibrated"
    DECODE_TOPK: ClassVar[int] = 1000  # the reference's nms_top_k

    def __init__(
        self,
        *,
        size: str,
        task: str | None = None,
        nc: int = 80,
        names: dict[int, str] | list[str] | None = None,
        imgsz: int | None = None,
    ) -> None:
        if imgsz is None and size in VARIANTS:
            imgsz = VARIANTS[size].imgsz
        super().__init__(size=size, task=task, nc=nc, names=names, imgsz=imgsz)

    @classmethod
    def build_net(cls, *, size: str, nc: int, task: str) -> nn.Module:
        from .nn import build_picodet

        return build_picodet(size=size, nc=nc)

    def decode(self, raw: Any) -> Tensor:
        from .postprocess import anchor_grid, decode

        feats = list(raw)
        return decode(feats, net=self.net, k=self.DECODE_TOPK, grid=self._per_level("grid", feats, anchor_grid))

    def build_criterion(self) -> Any:
        from .loss import PicoDetLoss

        return PicoDetLoss(self.net)
