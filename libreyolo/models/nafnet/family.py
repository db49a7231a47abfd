"""NAFNet restoration family: sizes t, w32 (``LibreNAFNet<size>-restore.pt``)."""

from __future__ import annotations

from typing import ClassVar

from torch import nn

from .._base.restore import RestoreFamily


class NAFNet(RestoreFamily):
    FAMILY: ClassVar[str] = "nafnet"
    SUPPORTS_CUDA_GRAPH: ClassVar[bool] = True  # docs/cuda-graph-parity.json (360bf40: every row bitwise)
    SUPPORTS_TRAIN_CUDA_GRAPH: ClassVar[bool] = True  # docs/cuda-graph-training-parity.json (360bf40)
    NAME_TOKEN: ClassVar[str] = "NAFNet"  # LibreNAFNet<size>-restore.pt
    SIZES: ClassVar[tuple[str, ...]] = ("t", "w32")
    STRIDE: ClassVar[int] = 16  # four 2x downsamplings
    SCALE: ClassVar[int] = 1
    DEFAULT_IMGSZ: ClassVar[int] = 128
    # The SIDD recipe of the paper: AdamW (betas 0.9, 0.9), lr 1e-3, no weight decay, cosine decay.
    TRAIN_DEFAULTS: ClassVar[dict[str, object]] = {
        "optimizer": "AdamW", "lr0": 1e-3, "momentum": 0.9, "weight_decay": 0.0, "warmup_bias_lr": 0.0,
        "cos_lr": True,
    }

    @classmethod
    def build_net(cls, *, size: str, nc: int, task: str) -> nn.Module:
        from .nn import build_nafnet

        return build_nafnet(size=size)
