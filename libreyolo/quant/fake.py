"""Reference fake quantization: the definition of the numbers (SPEC K-5, K-11).

``fake_quant_fp8_reference`` and ``fake_quant_int8_reference`` are plain tensor functions; the
``*_ste`` variants wrap them in an autograd function whose backward is the clipped
straight-through estimator: the gradient passes unchanged where ``|x / scale| <= qmax`` and is
zero where the value saturated (and where it is NaN).

Arithmetic (all float32, whatever the input dtype)::

    inv = scale.reciprocal()                       # once per scale element
    y   = clamp(x.float() * inv, -qmax, qmax)      # explicit clamp before the cast
    q   = y.to(float8_e4m3fn).float()              # fp8: round to nearest even on the E4M3 grid
    q   = round_half_even(y)                       # int8
    out = (q * scale).to(x.dtype)

Accelerated kernels registered in :mod:`libreyolo.kernels` must reproduce this bit for bit;
the dispatching ``fake_quant`` (fastest implementation that applies) is
:func:`libreyolo.kernels.quant.dispatch.fake_quant`.
"""

from __future__ import annotations

import torch
from torch import Tensor

from ..errors import ConfigError
from .formats import FP8_E4M3, INT8, SUPPORTED_DTYPES
from .scales import broadcast_scale


def check_inputs(x: Tensor, scale: Tensor, axis: int | None) -> Tensor:
    """Validate a fake-quant call; returns ``scale`` viewed to broadcast against ``x`` (float32)."""
    if not isinstance(x, Tensor):
        raise ConfigError(f"fake quantization needs a tensor, got {type(x).__name__}")
    if x.dtype not in SUPPORTED_DTYPES:
        raise ConfigError(
            f"fake quantization supports float32/float16/bfloat16 inputs, got {x.dtype}; "
            "cast the tensor first (e.g. x.float())"
        )
    if not isinstance(scale, Tensor) or not scale.is_floating_point():
        raise ConfigError("scale must be a floating-point tensor (see libreyolo.quant.compute_scale)")
    if scale.device != x.device:
        raise ConfigError(f"scale is on {scale.device} but the input is on {x.device}; move it with .to()")
    return broadcast_scale(scale.float(), x, axis)


def fake_quant_fp8_reference(x: Tensor, scale: Tensor, *, axis: int | None = None) -> Tensor:
    """FP8 E4M3 quantize-dequantize of ``x`` (no autograd semantics).

    Args:
        x (Tensor[...], float32/float16/bfloat16): values.
        scale (Tensor[] or Tensor[1], or Tensor[x.shape[axis]] with ``axis``; float): step scale.
        axis: channel axis of per-channel scales, or None for one per-tensor scale.

    Returns:
        Tensor like ``x`` (same shape and dtype): values on the scaled E4M3 grid, saturated at
        ``+-448 * scale``.

    Example:
        >>> fake_quant_fp8_reference(torch.tensor([1.06, 500.0]), torch.tensor(1.0))
        tensor([  1., 448.])
    """
    s = check_inputs(x, scale, axis)
    y = (x.float() * s.reciprocal()).clamp(-FP8_E4M3.qmax, FP8_E4M3.qmax)
    q = y.to(torch.float8_e4m3fn).float()
    return (q * s).to(x.dtype)


def fake_quant_int8_reference(x: Tensor, scale: Tensor, *, axis: int | None = None) -> Tensor:
    """Symmetric INT8 quantize-dequantize of ``x`` on ``[-127, 127] * scale`` (no autograd).

    Shapes and dtypes as :func:`fake_quant_fp8_reference`. Rounding is half to even.

    Example:
        >>> fake_quant_int8_reference(torch.tensor([0.5, 1.5, 300.0]), torch.tensor(1.0))
        tensor([  0.,   2., 127.])
    """
    s = check_inputs(x, scale, axis)
    y = (x.float() * s.reciprocal()).clamp(-INT8.qmax, INT8.qmax)
    return (torch.round(y) * s).to(x.dtype)


def ste_mask(x: Tensor, scale: Tensor, *, axis: int | None, qmax: float) -> Tensor:
    """Boolean mask where the clipped straight-through estimator passes the gradient."""
    s = broadcast_scale(scale.float(), x, axis)
    return (x.float() * s.reciprocal()).abs() <= qmax


class _ReferenceSTE(torch.autograd.Function):
    @staticmethod
    def forward(ctx, x: Tensor, scale: Tensor, axis: int | None, fp8: bool) -> Tensor:  # type: ignore[override]
        ctx.save_for_backward(x, scale)
        ctx.axis, ctx.qmax = axis, (FP8_E4M3.qmax if fp8 else INT8.qmax)
        fn = fake_quant_fp8_reference if fp8 else fake_quant_int8_reference
        return fn(x, scale, axis=axis)

    @staticmethod
    def backward(ctx, grad: Tensor):  # type: ignore[override]
        x, scale = ctx.saved_tensors
        mask = ste_mask(x, scale, axis=ctx.axis, qmax=ctx.qmax)
        return torch.where(mask, grad, torch.zeros_like(grad)), None, None, None


def fake_quant_fp8_ste(x: Tensor, scale: Tensor, *, axis: int | None = None) -> Tensor:
    """The ``fake_quant_fp8`` slot's reference: forward as :func:`fake_quant_fp8_reference`,
    backward the clipped straight-through estimator (no gradient to ``scale``)."""
    check_inputs(x, scale, axis)
    return _ReferenceSTE.apply(x, scale, axis, True)


def fake_quant_int8_ste(x: Tensor, scale: Tensor, *, axis: int | None = None) -> Tensor:
    """The ``fake_quant_int8`` slot's reference (see :func:`fake_quant_fp8_ste`)."""
    check_inputs(x, scale, axis)
    return _ReferenceSTE.apply(x, scale, axis, False)

