"""Weight packing: the checkpoint contract of finalized quantized models (SPEC K-5).

A packed weight is two tensors, stored in the state dict next to each other::

    <module>.weight_packed   Tensor[Cout, ...]  float8_e4m3fn (fp8) or int8 (int8)
    <module>.weight_scale    Tensor[Cout]       float32, per output channel (axis 0)

``unpack(pack(w)) == fake_quant_reference(w, scale, axis=0)`` bit for bit, and packing the
unpacked weight again with the same scale returns the same bytes. Packing has no accelerated
variants (it runs once, at finalize time); unpacking is the ``unpack_weights`` kernel slot
(:func:`libreyolo.kernels.quant.dispatch.unpack_weight`).
"""

from __future__ import annotations

from dataclasses import dataclass

import torch
from torch import Tensor

from ..errors import ConfigError
from .fake import check_inputs
from .formats import FP8_E4M3, QuantFormat, get_format
from .scales import broadcast_scale, compute_scale


@dataclass(frozen=True, kw_only=True)
class PackedWeight:
    """A packed weight: ``data`` (Tensor[Cout, ...], fmt.storage) and ``scale`` (Tensor[Cout], float32)."""

    data: Tensor
    scale: Tensor
    fmt: str


def pack_weight(w: Tensor, *, fmt: str | QuantFormat, scale: Tensor | None = None) -> PackedWeight:
    """Quantize a weight per output channel (axis 0) into its storage dtype.

    Args:
        w (Tensor[Cout, ...], float32/float16/bfloat16): weight.
        fmt: ``"fp8_e4m3"``/``"fp8"`` or ``"int8"``.
        scale (Tensor[Cout], float32 | None): per-channel scale; min-max (amax / qmax) when None.

    Example:
        >>> p = pack_weight(torch.randn(4, 3), fmt="fp8")
        >>> p.data.dtype, p.scale.shape
        (torch.float8_e4m3fn, torch.Size([4]))
    """
    f = get_format(fmt)
    if w.dim() < 1:
        raise ConfigError("pack_weight needs a weight with an output-channel axis (dim >= 1)")
    if scale is None:
        scale = compute_scale(w, fmt=f, axis=0)
    s = check_inputs(w, scale, 0)
    y = (w.detach().float() * s.reciprocal()).clamp(-f.qmax, f.qmax)
    data = y.to(torch.float8_e4m3fn) if f is FP8_E4M3 else torch.round(y).to(torch.int8)
    return PackedWeight(data=data.contiguous(), scale=scale.detach().float().reshape(-1).clone(), fmt=f.name)


def unpack_weight_reference(data: Tensor, scale: Tensor, *, dtype: torch.dtype = torch.float32) -> Tensor:
    """Dequantize a packed weight: ``(data.float() * scale[:, None, ...]).to(dtype)``.

    Args:
        data (Tensor[Cout, ...], float8_e4m3fn or int8); scale (Tensor[Cout], float32).
        dtype: output dtype (float32, float16 or bfloat16).

    Returns:
        Tensor[Cout, ...] of ``dtype``.
    """
    if data.dtype not in (torch.float8_e4m3fn, torch.int8):
        raise ConfigError(f"packed weights are float8_e4m3fn or int8, got {data.dtype}")
    s = broadcast_scale(scale.float(), data, 0)
    return (data.float() * s).to(dtype)

