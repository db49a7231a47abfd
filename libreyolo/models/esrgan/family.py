"""Real-ESRGAN generator (RRDBNet) x4 super-resolution family: sizes x4b6, x4
(``LibreRealESRGAN<size>-restore.pt``)."""

from __future__ import annotations

from typing import ClassVar

from torch import nn

from .._base.restore import RestoreFamily


class ESRGAN(RestoreFamily):
    FAMILY: ClassVar[str] = "esrgan"
    SUPPORTS_CUDA_GRAPH: ClassVar[bool] = True  # docs/cuda-graph-parity.json (360bf40: every row bitwise)
    INFER_CHANNELS_LAST: ClassVar[bool] = True  # benchmarks/results/layout/layout_predict.json (f71707c): graph step cl / nchw below 0.97
    SUPPORTS_TRAIN_CUDA_GRAPH: ClassVar[bool] = True  # docs/cuda-graph-training-parity.json (360bf40)
    NAME_TOKEN: ClassVar[str] = "RealESRGAN"  # LibreRealESRGAN<size>-restore.pt
    SIZES: ClassVar[tuple[str, ...]] = ("x4b6", "x4")
    STRIDE: ClassVar[int] = 1  # fully convolutional at any size
    SCALE: ClassVar[int] = 4
    DEFAULT_IMGSZ: ClassVar[int] = 64  # LQ patch; the HQ patch is 256
    # The PSNR-oriented pre-training of ESRGAN / Real-ESRNet: Adam (= AdamW without decay), lr 2e-4.
    TRAIN_DEFAULTS: ClassVar[dict[str, object]] = {
        "optimizer": "AdamW", "lr0": 2e-4, "momentum": 0.9, "weight_decay": 0.0, "warmup_bias_lr": 0.0,
    }

    @classmethod
    def build_net(cls, *, size: str, nc: int, task: str) -> nn.Module:
        from .nn import build_rrdbnet

        return build_rrdbnet(size=size)
