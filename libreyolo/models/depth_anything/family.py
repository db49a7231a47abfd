"""Depth Anything V2 depth family: sizes s (ViT-S/14 encoder), b (ViT-B/14)
(``LibreDepthAnythingV2<size>-depth.pt``)."""

from __future__ import annotations

from typing import ClassVar

from torch import nn

from .._base.depth import DepthFamily
from .._base.fused_attn import FusedAttentionOption
from .nn import SPECS


class DepthAnythingV2(FusedAttentionOption, DepthFamily):
    FAMILY: ClassVar[str] = "depth_anything"
    SUPPORTS_CUDA_GRAPH: ClassVar[bool] = True  # docs/cuda-graph-parity.json (360bf40: every row bitwise)
    SUPPORTS_TRAIN_CUDA_GRAPH: ClassVar[bool] = True  # docs/cuda-graph-training-parity.json (360bf40)
    NAME_TOKEN: ClassVar[str] = "DepthAnythingV2"  # LibreDepthAnythingV2<size>-depth.pt
    SIZES: ClassVar[tuple[str, ...]] = tuple(SPECS)
    DEFAULT_IMGSZ: ClassVar[int] = 518  # the published models' input (37 x 37 patches)
    STRIDE: ClassVar[int] = 14  # the patch size
    # SPEC K-9: the explicit attention equation until a byte-exact SDPA parity run; the flag flips it
    FUSED_ATTN_DEFAULT: ClassVar[bool] = False
    # Depth Anything V2's fine-tuning recipe: AdamW, lr 5e-6 for the encoder and 10x for the decoder,
    # weight decay 0.01; one rate here (the trainer has no per-part rates), the decoder's.
    TRAIN_DEFAULTS: ClassVar[dict[str, object]] = {
        "optimizer": "AdamW", "lr0": 5e-5, "momentum": 0.9, "weight_decay": 0.01, "warmup_bias_lr": 0.0,
    }

    @classmethod
    def build_net(cls, *, size: str, nc: int, task: str, fused_attn: bool | None = None) -> nn.Module:
        from .nn import build_depth_anything

        on = cls.FUSED_ATTN_DEFAULT if fused_attn is None else bool(fused_attn)
        return build_depth_anything(size=size, fused_attn=on)
