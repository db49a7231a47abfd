"""DeiT classification family: sizes t (DeiT-Tiny), s (DeiT-Small)."""

from __future__ import annotations

from typing import ClassVar

from .._vit.family import VisionTransformerFamily
from .._vit.net import ViTSpec
from .nn import SPECS


class DeiT(VisionTransformerFamily):
    # docs/cuda-graph-parity.json (3ecc799): every fused_attn=False row bitwise, all sizes and dtypes
    CUDA_GRAPH_VARIANTS: ClassVar[tuple[dict[str, object], ...]] = ({"fused_attn": False},)
    FAMILY: ClassVar[str] = "deit"
    NAME_TOKEN: ClassVar[str] = "DeiT"  # LibreDeiT<size>-cls.pt
    SIZES: ClassVar[tuple[str, ...]] = tuple(SPECS)
    SPECS: ClassVar[dict[str, ViTSpec]] = SPECS
