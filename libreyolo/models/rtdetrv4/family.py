"""RT-DETRv4 detection family: sizes s, m (weights ``LibreRTDETRv4<size>.pt``)."""

from __future__ import annotations

from typing import Any, ClassVar

from torch import nn

from .._detr.dfine_variants import RTDETRV4_VARIANTS
from .._detr.family import FDRFamily


class RTDETRv4(FDRFamily):
    """RT-DETRv4 (arXiv:2510.25257): the deployable detector is DEIM-D-FINE (HGNetv2, GELAN hybrid
    encoder, FDR decoder, SiLU decoder activations) trained with DEIM's recipe plus a training-only
    distillation from a vision foundation model (DINOv3 ViT-B) into the encoder's AIFI output.
    The distillation (feature projector, teacher, loss) is not implemented: training here is DEIM's.
    Trains in full precision by default (``amp=False``)."""

    FAMILY: ClassVar[str] = "rtdetrv4"
    NAME_TOKEN: ClassVar[str] = "RTDETRv4"
    SIZES: ClassVar[tuple[str, ...]] = tuple(RTDETRV4_VARIANTS)
    LOSS_NAMES: ClassVar[tuple[str, ...]] = ("mal", "l1", "giou", "fgl", "ddf")

    SUPPORTS_CUDA_GRAPH: ClassVar[bool] = False
    CUDA_GRAPH_REASON: ClassVar[str] = ("docs/cuda-graph-parity.json (e1c602a): the s size's float16 captured-decode "
                                        "row fails its vacuity check (both probes gave the same candidates)")
    SUPPORTS_TRAIN_CUDA_GRAPH: ClassVar[bool] = True  # docs/cuda-graph-training-parity.json

    # Reference recipe (rtv4_hgnetv2_s_coco.yml: AdamW lr 4e-4, backbone 2e-4, weight decay 1e-4), fp32.
    TRAIN_DEFAULTS: ClassVar[dict[str, object]] = {
        "optimizer": "AdamW", "lr0": 4e-4, "momentum": 0.9, "weight_decay": 1e-4, "mosaic": 0.5, "amp": False,
        "warmup_bias_lr": 0.0,
    }

    @classmethod
    def build_net(cls, *, size: str, nc: int, task: str) -> nn.Module:
        from .nn import build_rtdetrv4

        return build_rtdetrv4(size=size, nc=nc)

    def build_criterion(self) -> Any:
        from .._detr.dfine_losses import build_deim_criterion

        return build_deim_criterion(self.net)
