"""SAM (Segment Anything) promptable-segmentation family: sizes tiny (test size), vit_b, vit_l,
vit_h (``LibreSAM<size>-prompt.pt``)."""

from __future__ import annotations

from typing import ClassVar

from torch import nn

from .._sam.family import SamFamily
from .variants import VARIANTS


class SAM(SamFamily):
    FAMILY: ClassVar[str] = "sam"
    SUPPORTS_CUDA_GRAPH: ClassVar[bool] = True  # docs/cuda-graph-parity.json
    NAME_TOKEN: ClassVar[str] = "SAM"  # LibreSAM<size>-prompt.pt
    SIZES: ClassVar[tuple[str, ...]] = tuple(VARIANTS)  # tiny first: the contract tests' smallest size

    @classmethod
    def size_imgsz(cls, size: str) -> int:
        return VARIANTS[size][0]

    @classmethod
    def build_net(cls, *, size: str, nc: int, task: str, fused_attn: bool | None = None) -> nn.Module:
        from ...kernels.attention import set_fused_attention
        from .build import build_sam

        net = build_sam(size)
        set_fused_attention(net, enabled=cls.FUSED_ATTN_DEFAULT if fused_attn is None else bool(fused_attn))
        return net
