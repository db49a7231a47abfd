"""RT-DETRv2 detection family: sizes r18, r34 (weights ``LibreRTDETRv2<size>.pt``)."""

from __future__ import annotations

from typing import Any, ClassVar

from torch import Tensor, nn

from ...graphs.seam import Stage
from .._base.family import Family

DECODER_EAGER_REASON = ("in training the decoder's token count follows the largest ground-truth count of the "
                        "batch (denoising queries) and the Hungarian criterion syncs with the host")


class RTDETRv2(Family):
    """RT-DETRv2 (arXiv:2407.17140): RT-DETR with per-level sampling points and an optional
    discrete sampling operator in the decoder (see README).

    Seam (SPEC G-9): :meth:`forward_stages` = backbone + encoder, then decoder + heads; both
    capturable at inference (denoising is off, top-k has a fixed k). :meth:`train_stages` =
    backbone + encoder (capturable: it is exactly the train-mode ``net(x)``), then decoder +
    criterion (eager).

    ``iou`` and ``agnostic`` of :meth:`postprocess` are ignored: there is no NMS.
    """

    FAMILY: ClassVar[str] = "rtdetrv2"
    NAME_TOKEN: ClassVar[str] = "RTDETRv2"
    TASKS: ClassVar[tuple[str, ...]] = ("detect",)
    SIZES: ClassVar[tuple[str, ...]] = ("r18", "r34")
    DEFAULT_IMGSZ: ClassVar[int] = 640
    STRIDE: ClassVar[int] = 32
    LOSS_NAMES: ClassVar[tuple[str, ...]] = ("vfl", "l1", "giou")
    OUTPUT_NAMES: ClassVar[tuple[str, ...]] = ("logits", "boxes")  # [B, 300, nc], [B, 300, 4] xyxy px
    EXPORT_DYNAMIC_AXES: ClassVar[tuple[str, ...]] = ("batch",)

    SUPPORTS_CUDA_GRAPH: ClassVar[bool] = True  # docs/cuda-graph-parity.json
    CUDA_GRAPH_REASON: ClassVar[str] = "no bitwise parity run recorded yet"
    SUPPORTS_TRAIN_CUDA_GRAPH: ClassVar[bool] = False
    TRAIN_CUDA_GRAPH_REASON: ClassVar[str] = (
        "seam-split training capture (backbone+encoder) failed its GPU step-zero gradient check "
        "(encoder input-projection BatchNorm gradients differed); trains eager until fixed"
    )

    # The reference training recipe as TrainConfig keys (AdamW, lr 1e-4, weight decay 1e-4); the
    # reference also clips the gradient norm at 0.1 of its per-box-normalised loss, i.e. about
    # 0.1 * nbs here (the loss is scaled by the batch size and accumulated to nbs images).
    TRAIN_DEFAULTS: ClassVar[dict[str, object]] = {
        "optimizer": "AdamW", "lr0": 1e-4, "momentum": 0.9, "weight_decay": 1e-4, "mosaic": 0.0,
    }

    @classmethod
    def build_net(cls, *, size: str, nc: int, task: str) -> nn.Module:
        from .nn import build_rtdetrv2

        return build_rtdetrv2(size=size, nc=nc)

    def postprocess(self, raw: Any, *, conf: float, iou: float, classes: list[int] | None,
                    max_det: int, agnostic: bool) -> list[Tensor]:
        from .postprocess import postprocess

        return postprocess(raw, nc=self.nc, conf=conf, classes=classes, max_det=max_det)

    def build_criterion(self) -> Any:
        from .loss import build_rtdetrv2_loss

        return build_rtdetrv2_loss(self.net)

    def forward_stages(self) -> list[Stage]:
        net: Any = self.net
        return [Stage(name="backbone+encoder", fn=net.encode, capturable=True),
                Stage(name="decoder", fn=net.decode, capturable=True)]

    def train_stages(self) -> list[Stage]:
        """The training step as stages (SPEC G-9).

        Stage 0, capturable: an ``nn.Module`` holding only the backbone and encoder (its output
        equals the train-mode ``net(x)``: the three encoder maps), so a training graph of it lists
        exactly the parameters it uses. Stage 1, eager: the decoder with denoising queries, then
        the Hungarian criterion (``build_criterion()(maps, batch)`` runs both).
        """
        net: Any = self.net
        return [Stage(name="backbone+encoder", fn=net.trunk(), capturable=True),
                Stage(name="decoder+criterion", fn=net.decoder, capturable=False, reason=DECODER_EAGER_REASON)]
