"""Vision Transformer classification family: sizes s16 (ViT-S/16), b16 (ViT-B/16)."""

from __future__ import annotations

from typing import ClassVar

from .._vit.family import VisionTransformerFamily
from .._vit.net import ViTSpec
from .nn import SPECS


class ViT(VisionTransformerFamily):
    # docs/cuda-graph-parity.json (3ecc799): every fused_attn=False row bitwise, all sizes and dtypes
    CUDA_GRAPH_VARIANTS: ClassVar[tuple[dict[str, object], ...]] = ({"fused_attn": False},)
    FAMILY: ClassVar[str] = "vit"
    NAME_TOKEN: ClassVar[str] = "ViT"  # LibreViT<size>-cls.pt
    SIZES: ClassVar[tuple[str, ...]] = tuple(SPECS)
    SPECS: ClassVar[dict[str, ViTSpec]] = SPECS
