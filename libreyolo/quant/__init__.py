"""Reference quantization: formats, scales, fake quantization, weight packing (SPEC K-5).

These functions define what quantized numbers mean and import no kernel; :mod:`libreyolo.kernels`
only makes them fast. What dispatches through the kernel registry lives above this package, in
:mod:`libreyolo.kernels.quant`: ``fake_quant`` and ``unpack_weight`` in
:mod:`~libreyolo.kernels.quant.dispatch`, the quantized layers in
:mod:`~libreyolo.kernels.quant.modules` and whole-model quantization (``model.quantize``:
``quantize_model``, ``dequantize_model``, ``quant_info``) in :mod:`~libreyolo.kernels.quant.model`.
"""

from __future__ import annotations

from .fake import (
    fake_quant_fp8_reference,
    fake_quant_fp8_ste,
    fake_quant_int8_reference,
    fake_quant_int8_ste,
)
from .formats import FP8_E4M3, INT8, QuantFormat, get_format
from .packing import PackedWeight, pack_weight, unpack_weight_reference
from .scales import amax, compute_scale, scale_from_amax

__all__ = [
    "FP8_E4M3", "INT8", "PackedWeight", "QuantFormat", "amax", "compute_scale",
    "fake_quant_fp8_reference", "fake_quant_fp8_ste", "fake_quant_int8_reference",
    "fake_quant_int8_ste", "get_format", "pack_weight", "scale_from_amax",
    "unpack_weight_reference",
]
