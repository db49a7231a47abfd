"""MobileSAM promptable-segmentation family: size vit_t, TinyViT-5M image encoder + SAM's prompt
encoder and mask decoder (``LibreMobileSAMvit_t-prompt.pt``)."""

from __future__ import annotations

from typing import ClassVar

from torch import nn

from .._sam.family import SamFamily

# MobileSAM (Zhang et al., 2023, Table 1 / model card): 5.78 M image encoder, 9.66 M in all
PARAMS_M: dict[str, tuple[float, float]] = {"vit_t": (9.66, 5.78)}


class MobileSAM(SamFamily):
    FAMILY: ClassVar[str] = "mobilesam"
    SUPPORTS_CUDA_GRAPH: ClassVar[bool] = True  # docs/cuda-graph-parity.json
    NAME_TOKEN: ClassVar[str] = "MobileSAM"  # LibreMobileSAM<size>-prompt.pt
    SIZES: ClassVar[tuple[str, ...]] = ("vit_t",)

    @classmethod
    def build_net(cls, *, size: str, nc: int, task: str, fused_attn: bool | None = None) -> nn.Module:
        from ...kernels.attention import set_fused_attention
        from .._sam.net import SamNet
        from .._sam.prompt import PromptPath
        from .nn import TinyViTImageEncoder

        net = SamNet(TinyViTImageEncoder(), PromptPath(256))
        set_fused_attention(net, enabled=cls.FUSED_ATTN_DEFAULT if fused_attn is None else bool(fused_attn))
        return net
