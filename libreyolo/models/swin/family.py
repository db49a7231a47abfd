"""Swin Transformer classification family: sizes t (Swin-T), s (Swin-S)."""

from __future__ import annotations

from typing import ClassVar

from torch import nn

from ...errors import ConfigError
from .._base.classify import ClassifyFamily
from .._base.fused_attn import FusedAttentionOption
from .nn import SPECS, build_swin_classifier


class Swin(FusedAttentionOption, ClassifyFamily):
    """``fused_attn`` is off by default (SPEC K-9: Swin keeps the manual math until a byte-exact SDPA
    parity run); ``model.arch`` is ``{"fused_attn": True}`` with it on in every layer."""

    FAMILY: ClassVar[str] = "swin"
    NAME_TOKEN: ClassVar[str] = "Swin"  # LibreSwin<size>-cls.pt
    SIZES: ClassVar[tuple[str, ...]] = tuple(SPECS)
    STRIDE: ClassVar[int] = 32  # patch 4 and three 2x patch merges: input sides must be multiples of it
    FUSED_ATTN_DEFAULT: ClassVar[bool] = False
    SUPPORTS_CUDA_GRAPH: ClassVar[bool] = True  # docs/cuda-graph-parity.json (cf0462e: 4/4 rows bitwise, fused_attn off)
    SUPPORTS_TRAIN_CUDA_GRAPH: ClassVar[bool] = True  # docs/cuda-graph-training-parity.json (45c0b06: 4/4 rows)
    # the Swin recipe: AdamW, weight decay 0.05, base lr 5e-4 at batch 512 (no bias warm-up of its own)
    TRAIN_DEFAULTS: ClassVar[dict[str, object]] = {
        "optimizer": "AdamW", "lr0": 5e-4, "momentum": 0.9, "weight_decay": 0.05, "warmup_bias_lr": 0.0,
    }

    @classmethod
    def build_net(cls, *, size: str, nc: int, task: str, fused_attn: bool = False) -> nn.Module:
        if size not in SPECS:
            raise ConfigError(f"swin has no size {size!r}; sizes: {', '.join(SPECS)}")
        return build_swin_classifier(SPECS[size], nc=nc, fused_attn=fused_attn)
