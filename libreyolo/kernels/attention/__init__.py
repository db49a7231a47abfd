"""Attention kernels shared across families (SPEC K-5..K-9, K-12).

Two things live here:

* the ``ms_deform_attn`` slot: multi-scale deformable attention. It has **no reference
  implementation** (K-6): callers (``libreyolo.layers.msda``) ask :func:`resolve` and keep their
  own portable ``grid_sample`` path (:mod:`.msda_ref`) when it returns ``None``. Providers, imported lazily on first
  use of the slot and never under ``LIBREYOLO_KERNELS=off``, register newest first:

  1. ``"triton"`` (:mod:`.msda_triton`): in-tree Triton forward and backward;
  2. ``"hub"`` (:mod:`.msda_hub`): the compiled Deformable DETR kernel from the Hugging Face
     Hub through the optional ``kernels`` package; registered last, so it is tried first.

* the fused-attention policy (K-9): whether a module whose ``fused_attn`` flag is on may call
  ``torch.nn.functional.scaled_dot_product_attention`` right now (:func:`sdpa_allowed`), and
  :func:`set_fused_attention`, which flips every such flag of a model.

Importing this package declares the slot (a registry entry, nothing else): no provider, Triton,
CUDA context or network is touched.
"""

from __future__ import annotations

from ..registry import define_slot
from .policy import fused_attention_modules, sdpa_allowed, set_fused_attention, use_sdpa

MS_DEFORM_ATTN = "ms_deform_attn"
"""Name of the multi-scale deformable attention slot."""

MSDA_PROVIDERS = (
    "libreyolo.kernels.attention.msda_triton",  # registered first ...
    "libreyolo.kernels.attention.msda_hub",  # ... so the Hub provider (newest) is tried first
)

define_slot(MS_DEFORM_ATTN, providers=MSDA_PROVIDERS)


class KernelFallback(RuntimeError):
    """Raised by a provider that failed at run time and disabled itself for the process (one
    warning, K-7). The caller catches exactly this type and runs its portable path."""


__all__ = [
    "KernelFallback",
    "MSDA_PROVIDERS",
    "MS_DEFORM_ATTN",
    "fused_attention_modules",
    "sdpa_allowed",
    "set_fused_attention",
    "use_sdpa",
]
