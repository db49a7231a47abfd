"""DINOv2 classification family: sizes s14 (ViT-S/14), b14 (ViT-B/14), l14 (ViT-L/14)."""

from __future__ import annotations

from typing import ClassVar

from .._vit.dinov2 import DINOv2Family
from .._vit.net import ViTSpec
from .nn import SPECS


class DINOv2(DINOv2Family):
    FAMILY: ClassVar[str] = "dinov2"
    NAME_TOKEN: ClassVar[str] = "DINOv2"  # LibreDINOv2<size>-cls.pt
    SIZES: ClassVar[tuple[str, ...]] = tuple(SPECS)
    SPECS: ClassVar[dict[str, ViTSpec]] = SPECS
    SUPPORTS_CUDA_GRAPH: ClassVar[bool] = True  # docs/cuda-graph-parity.json (cf0462e: 6/6 rows bitwise, fused_attn off)
    SUPPORTS_TRAIN_CUDA_GRAPH: ClassVar[bool] = True  # docs/cuda-graph-training-parity.json (45c0b06: 6/6 rows)
