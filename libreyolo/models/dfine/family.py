"""D-FINE detection family: sizes n, s (weights ``LibreDFINE<size>.pt``)."""

from __future__ import annotations

from typing import Any, ClassVar

from torch import nn

from .._detr.family import FDRFamily


class DFINE(FDRFamily):
    """D-FINE (arXiv:2410.13842): HGNetv2, GELAN hybrid encoder, FDR decoder with GO-LSD, no NMS.

    Trains in full precision by default, as the reference (``amp=False`` in
    :attr:`TRAIN_DEFAULTS`, applied by the trainer unless ``amp`` is passed).
    """

    FAMILY: ClassVar[str] = "dfine"
    NAME_TOKEN: ClassVar[str] = "DFINE"
    LOSS_NAMES: ClassVar[tuple[str, ...]] = ("vfl", "l1", "giou", "fgl", "ddf")

    SUPPORTS_CUDA_GRAPH: ClassVar[bool] = True  # docs/cuda-graph-parity.json
    SUPPORTS_TRAIN_CUDA_GRAPH: ClassVar[bool] = True  # docs/cuda-graph-training-parity.json (seam: trunk captured)

    # Reference recipe (dfine_hgnetv2_s_coco.yml: AdamW lr 2.5e-4, weight decay 1.25e-4; the
    # n config uses lr 8e-4, weight decay 1e-4), fp32 training.
    TRAIN_DEFAULTS: ClassVar[dict[str, object]] = {
        "optimizer": "AdamW", "lr0": 2.5e-4, "momentum": 0.9, "weight_decay": 1.25e-4, "mosaic": 0.0, "amp": False,
        "warmup_bias_lr": 0.0,  # no separate bias warm-up in the reference
    }

    @classmethod
    def build_net(cls, *, size: str, nc: int, task: str) -> nn.Module:
        from .nn import build_dfine

        return build_dfine(size=size, nc=nc)

    def build_criterion(self) -> Any:
        from .loss import build_dfine_loss

        return build_dfine_loss(self.net)
