"""PIDNet semantic-segmentation family: size s (``LibrePIDNets-sem.pt``)."""

from __future__ import annotations

from typing import ClassVar

from torch import nn

from .._base.semantic import SemanticFamily


class PIDNet(SemanticFamily):
    FAMILY: ClassVar[str] = "pidnet"
    NAME_TOKEN: ClassVar[str] = "PIDNet"  # LibrePIDNet<size>-sem.pt
    SIZES: ClassVar[tuple[str, ...]] = ("s",)
    DEFAULT_IMGSZ: ClassVar[int] = 512
    LOSS_NAMES: ClassVar[tuple[str, ...]] = ("ce", "aux", "bd", "sb")
    SUPPORTS_CUDA_GRAPH: ClassVar[bool] = True  # docs/cuda-graph-parity.json (360bf40: every row bitwise)
    SUPPORTS_TRAIN_CUDA_GRAPH: ClassVar[bool] = True  # docs/cuda-graph-training-parity.json (360bf40)
    # The reference recipe (Cityscapes, ImageNet-pretrained trunk): SGD, lr 0.01, momentum 0.9, wd 5e-4.
    TRAIN_DEFAULTS: ClassVar[dict[str, object]] = {
        "optimizer": "SGD", "lr0": 0.01, "momentum": 0.9, "weight_decay": 5e-4, "warmup_bias_lr": 0.0,
    }

    @classmethod
    def build_net(cls, *, size: str, nc: int, task: str) -> nn.Module:
        from .nn import build_pidnet

        return build_pidnet(size=size, nc=nc)

    def build_criterion(self) -> object:
        from .loss import PIDNetLoss

        return PIDNetLoss()
