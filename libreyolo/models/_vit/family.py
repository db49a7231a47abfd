"""Family glue of the Vision Transformers: sizes from a spec table, the ``fused_attn`` option.

A subclass declares ``FAMILY``, ``NAME_TOKEN``, ``SIZES`` and ``SPECS`` (size -> :class:`ViTSpec`),
and ``FUSED_ATTN_DEFAULT``: on for ViT and DeiT (as upstream timm; SPEC K-9), off for the families
that keep the explicit equation until a byte-exact parity run (DINOv2). ``fused_attn`` is the
family's one architecture option: ``model.arch`` is ``{}`` while every attention layer has the
default and ``{"fused_attn": <the other value>}`` otherwise (a mix counts as off), so a checkpoint
saved with it flipped loads flipped, the parity harness keys those rows apart
(``parity_predict.py --arch '{"fused_attn": false}'``), and a head rebuilt for a new class count
keeps the setting. The weights are the same either way.
"""

from __future__ import annotations

from typing import Any, ClassVar

from torch import nn

from ...errors import ConfigError
from ...kernels.attention import fused_attention_modules, set_fused_attention
from .._base.classify import ClassifyFamily
from .net import ViTSpec, build_vit_classifier


class VisionTransformerFamily(ClassifyFamily):
    """Base of the ViT-lineage classify families (module docstring)."""

    SPECS: ClassVar[dict[str, ViTSpec]] = {}
    STRIDE: ClassVar[int] = 16  # the patch size
    FUSED_ATTN_DEFAULT: ClassVar[bool] = True
    # docs/cuda-graph-parity.json (commit 3ecc799): every fused_attn=False row is bitwise, every
    # default (fused_attn=True) row differs, as SPEC K-9 expects: eager runs SDPA, the graph the equation
    SUPPORTS_CUDA_GRAPH: ClassVar[bool] = False
    CUDA_GRAPH_REASON: ClassVar[str] = (
        "with fused_attn on (the default) eager SDPA and the captured attention equation differ in the last "
        "bits (fp32 up to 2.5e-6, fp16 up to 2.4e-3; docs/cuda-graph-parity.json); the fused_attn=False rows "
        "are bitwise"
    )
    SUPPORTS_TRAIN_CUDA_GRAPH: ClassVar[bool] = False
    TRAIN_CUDA_GRAPH_REASON: ClassVar[str] = (
        "step-zero loss not bit-identical in any row (docs/cuda-graph-training-parity.json): stochastic depth "
        "draws from the graph's own RNG stream and eager training runs SDPA"
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

    @property
    def arch(self) -> dict[str, Any]:
        """``{}`` with every attention layer at the family default, else ``{"fused_attn": <on>}``."""
        flags = [m.fused_attn for m in fused_attention_modules(self.net)]
        on = bool(flags) and all(flags)
        return {} if on == self.FUSED_ATTN_DEFAULT else {"fused_attn": on}

    def set_arch(self, *, fused_attn: bool | None = None) -> None:
        """Turn fused attention on or off in every attention layer, in place (weights kept); no
        argument restores the family default. The same as ``set_fused_attention(model.net,
        enabled=fused_attn)``; captured graphs do not depend on it (capture always runs the
        explicit equation)."""
        on = self.FUSED_ATTN_DEFAULT if fused_attn is None else bool(fused_attn)
        set_fused_attention(self.net, enabled=on)
