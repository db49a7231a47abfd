"""Declaration of the in-tree op slots: reference implementations and provider modules.

Provider modules are imported on first use of their slot, never under LIBREYOLO_KERNELS=off.
References are reached through small trampolines so that ``import libreyolo.kernels`` stays
cheap (``libreyolo.quant`` is imported on the first call, not here).

Quantization slots (SPEC K-5, K-6):

=================  =====================================  ==========================================
slot               reference                              accelerated providers
=================  =====================================  ==========================================
fake_quant_fp8     libreyolo.quant.fake_quant_fp8_ste     kernels.quant.simulate (Triton, "triton")
fake_quant_int8    libreyolo.quant.fake_quant_int8_ste    kernels.quant.simulate (Triton, "triton")
unpack_weights     libreyolo.quant.unpack_weight_reference kernels.quant.execute (Triton, "triton")
fp8_gemm           none (K-6: callers keep their path)    kernels.quant.execute (_scaled_mm, "scaled_mm")
=================  =====================================  ==========================================

Weight *packing* is not a slot: it is the checkpoint contract and has no variants.
The attention slot (``ms_deform_attn``) is declared by ``libreyolo.kernels.attention`` and the
fused convolution epilogue (``bias_act``) by ``libreyolo.kernels.conv_act``; :func:`declare`
imports both (registry entries only: no provider, Triton or CUDA is touched).
"""

from __future__ import annotations

from typing import Any

from .registry import define_slot

SIMULATE = "libreyolo.kernels.quant.simulate"
EXECUTE = "libreyolo.kernels.quant.execute"


def _fake_quant_fp8(x: Any, scale: Any, *, axis: int | None = None) -> Any:
    from ..quant.fake import fake_quant_fp8_ste

    return fake_quant_fp8_ste(x, scale, axis=axis)


def _fake_quant_int8(x: Any, scale: Any, *, axis: int | None = None) -> Any:
    from ..quant.fake import fake_quant_int8_ste

    return fake_quant_int8_ste(x, scale, axis=axis)


def _unpack_weights(data: Any, scale: Any, *, dtype: Any = None) -> Any:
    import torch

    from ..quant.packing import unpack_weight_reference

    return unpack_weight_reference(data, scale, dtype=dtype or torch.float32)


def declare() -> None:
    """Declare the quantization slots (idempotent)."""
    define_slot("fake_quant_fp8", reference=_fake_quant_fp8, providers=(SIMULATE,))
    define_slot("fake_quant_int8", reference=_fake_quant_int8, providers=(SIMULATE,))
    define_slot("unpack_weights", reference=_unpack_weights, providers=(EXECUTE,))
    define_slot("fp8_gemm", providers=(EXECUTE,))
    from . import attention, conv_act  # noqa: F401 - declare ms_deform_attn and bias_act


declare()
