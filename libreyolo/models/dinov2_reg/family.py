"""DINOv2-with-registers classification family: sizes s14, b14, l14 (four register tokens)."""

from __future__ import annotations

from typing import ClassVar

from .._vit.dinov2 import DINOv2Family
from .._vit.net import ViTSpec
from .nn import SPECS


class DINOv2Reg(DINOv2Family):
    FAMILY: ClassVar[str] = "dinov2_reg"
    NAME_TOKEN: ClassVar[str] = "DINOv2reg"  # LibreDINOv2reg<size>-cls.pt
    SIZES: ClassVar[tuple[str, ...]] = tuple(SPECS)
    SPECS: ClassVar[dict[str, ViTSpec]] = SPECS
    # the network is dinov2's plus four tokens; its own rows have not been run on a GPU yet
    SUPPORTS_CUDA_GRAPH: ClassVar[bool] = False
    CUDA_GRAPH_REASON: ClassVar[str] = "no bitwise parity run recorded yet"
    SUPPORTS_TRAIN_CUDA_GRAPH: ClassVar[bool] = False
    TRAIN_CUDA_GRAPH_REASON: ClassVar[str] = "no bitwise parity run recorded yet"
