"""Family glue of the Vision Transformers: sizes from a spec table, the ``fused_attn`` option.

A subclass declares ``FAMILY``, ``NAME_TOKEN``, ``SIZES`` and ``SPECS`` (size -> :class:`ViTSpec`),
and ``FUSED_ATTN_DEFAULT``: on for ViT and DeiT (as upstream timm; SPEC K-9), off for the families
that keep the explicit equation until a byte-exact parity run (DINOv2). ``fused_attn`` is the
family's one architecture option (:class:`~libreyolo.models._base.fused_attn.FusedAttentionOption`):
``model.arch`` is ``{}`` while every attention layer has the default and ``{"fused_attn": <the
other value>}`` otherwise (parity rows of the other state: ``parity_predict.py --arch ...``).
"""

from __future__ import annotations

from typing import ClassVar

from torch import nn

from ...errors import ConfigError
from .._base.classify import ClassifyFamily
from .._base.fused_attn import FusedAttentionOption
from .net import ViTSpec, build_vit_classifier


class VisionTransformerFamily(FusedAttentionOption, ClassifyFamily):
    """Base of the ViT-lineage classify families (module docstring)."""

    FUSED_ATTN_DEFAULT: ClassVar[bool] = True  # as timm (SPEC K-9 names ViT/DeiT on by default)

    SPECS: ClassVar[dict[str, ViTSpec]] = {}
    STRIDE: ClassVar[int] = 16  # the patch size
    # docs/cuda-graph-parity.json (commit 3ecc799): every fused_attn=False row is bitwise, every
    # default (fused_attn=True) row differs, as SPEC K-9 expects: eager runs SDPA, the graph the equation
    SUPPORTS_CUDA_GRAPH: ClassVar[bool] = False
    CUDA_GRAPH_REASON: ClassVar[str] = (
        "with fused_attn on (the default) eager SDPA and the captured attention equation differ in the last "
        "bits (fp32 up to 2.5e-6, fp16 up to 2.4e-3; docs/cuda-graph-parity.json); the fused_attn=False rows "
        "are bitwise: set_arch(fused_attn=False) to use graphs"
    )
    SUPPORTS_TRAIN_CUDA_GRAPH: ClassVar[bool] = False
    TRAIN_CUDA_GRAPH_REASON: ClassVar[str] = (
        "step-zero loss not bit-identical in 5 of 8 rows (docs/cuda-graph-training-parity.json, 45c0b06): with "
        "fused_attn on (the default) eager training runs SDPA while the capture runs the equation"
    )
    # AdamW with weight decay 0.05 (the DeiT recipe; SGD trains transformers poorly), lr 5e-4
    # (DeiT's rate at batch 512; it also suits the short runs of the built-in demo data)
    TRAIN_DEFAULTS: ClassVar[dict[str, object]] = {
        "optimizer": "AdamW", "lr0": 5e-4, "momentum": 0.9, "weight_decay": 0.05, "warmup_bias_lr": 0.0,
    }

    @classmethod
    def build_net(cls, *, size: str, nc: int, task: str, fused_attn: bool | None = None) -> nn.Module:
        if size not in cls.SPECS:
            raise ConfigError(f"{cls.FAMILY} has no size {size!r}; sizes: {', '.join(cls.SPECS)}")
        on = cls.FUSED_ATTN_DEFAULT if fused_attn is None else bool(fused_attn)
        return build_vit_classifier(cls.SPECS[size], nc=nc, fused_attn=on)
