"""SegFormer semantic-segmentation family: sizes b0, b1 (``LibreSegFormer<size>-sem.pt``)."""

from __future__ import annotations

from typing import ClassVar

from torch import nn

from .._base.semantic import SemanticFamily


class SegFormer(SemanticFamily):
    FAMILY: ClassVar[str] = "segformer"
    NAME_TOKEN: ClassVar[str] = "SegFormer"  # LibreSegFormer<size>-sem.pt
    SIZES: ClassVar[tuple[str, ...]] = ("b0", "b1")
    DEFAULT_IMGSZ: ClassVar[int] = 512
    SUPPORTS_CUDA_GRAPH: ClassVar[bool] = True  # docs/cuda-graph-parity.json (7959233: 4/4 rows bitwise)
    INFER_CHANNELS_LAST: ClassVar[bool] = True  # benchmarks/results/layout/layout_predict.json (f71707c): graph step cl / nchw below 0.97
    SUPPORTS_TRAIN_CUDA_GRAPH: ClassVar[bool] = False
    TRAIN_CUDA_GRAPH_REASON: ClassVar[str] = (
        "step-zero loss bit-identical in 2 of 4 rows (docs/cuda-graph-training-parity.json, 45c0b06, with the "
        "capture's RNG restore); b0 float32 and b1 float16 differ, cause not found yet"
    )
    # The reference recipe (ADE20K, ImageNet-pretrained encoder): AdamW, lr 6e-5, weight decay 0.01.
    TRAIN_DEFAULTS: ClassVar[dict[str, object]] = {
        "optimizer": "AdamW", "lr0": 6e-5, "momentum": 0.9, "weight_decay": 0.01, "warmup_bias_lr": 0.0,
    }

    @classmethod
    def build_net(cls, *, size: str, nc: int, task: str) -> nn.Module:
        from .nn import build_segformer

        return build_segformer(size=size, nc=nc)
