"""DEIM detection family (DEIM-D-FINE): sizes n, s (weights ``LibreDEIM<size>.pt``)."""

from __future__ import annotations

from typing import Any, ClassVar

from torch import nn

from .._detr.family import FDRFamily


class DEIM(FDRFamily):
    """DEIM (arXiv:2412.04234) on D-FINE: the D-FINE network trained with dense one-to-one
    matching and the matchability-aware loss (MAL); no NMS. Trains in full precision by
    default (``amp=False`` in :attr:`TRAIN_DEFAULTS`, applied unless ``amp`` is passed).
    """

    FAMILY: ClassVar[str] = "deim"
    NAME_TOKEN: ClassVar[str] = "DEIM"
    LOSS_NAMES: ClassVar[tuple[str, ...]] = ("mal", "l1", "giou", "fgl", "ddf")

    SUPPORTS_CUDA_GRAPH: ClassVar[bool] = False
    CUDA_GRAPH_REASON: ClassVar[str] = (
        "docs/cuda-graph-parity.json (e1c602a, after the SiLU change): the s size's float16 captured "
        "decode row fails its vacuity check (both probes gave the same candidates), so it proves nothing")
    SUPPORTS_TRAIN_CUDA_GRAPH: ClassVar[bool] = True  # docs/cuda-graph-training-parity.json (seam: trunk captured)

    # Reference recipe (DEIM-D-FINE-S: AdamW lr 2.5e-4, weight decay 1.25e-4), fp32, and dense
    # O2O through the trainer's mosaic (DEIM's mosaic probability 0.5). DEIM's batch mixup (0.5 in
    # its early epochs) is not set: the trainer's mixup blends two mosaics, a different operation.
    TRAIN_DEFAULTS: ClassVar[dict[str, object]] = {
        "optimizer": "AdamW", "lr0": 2.5e-4, "momentum": 0.9, "weight_decay": 1.25e-4, "mosaic": 0.5, "amp": False,
        "warmup_bias_lr": 0.0,  # no separate bias warm-up in the reference
    }

    @classmethod
    def build_net(cls, *, size: str, nc: int, task: str) -> nn.Module:
        from .nn import build_deim

        return build_deim(size=size, nc=nc)

    def build_criterion(self) -> Any:
        from .loss import build_deim_loss

        return build_deim_loss(self.net)
