"""Triton fake quantization (FP8 E4M3 and INT8), forward and straight-through backward.

Bit-identical to :mod:`libreyolo.quant.fake` (K-11): the same float32 products
``x * reciprocal(scale)`` and ``q * scale``, an explicit clamp, and rounding reproduced by
:mod:`libreyolo.kernels.quant.triton_fp8`. One element per lane, ``BLOCK`` elements per program,
no autotuning (a fixed configuration also keeps the interpreter fast).
"""

from __future__ import annotations

import math

import torch
import triton
import triton.language as tl
from torch import Tensor

from ....quant.fake import check_inputs
from ....quant.formats import FP8_E4M3, INT8
from ..platform import MAX_NUMEL
from ..triton_fp8 import bf16_bits, copy_sign, round_e4m3_abs, round_half_even_abs

BLOCK = 2048
NUM_WARPS = 8


@triton.jit
def _fake_quant_fwd(x_ptr, out_ptr, scale_ptr, inv_ptr, n, inner, channels,
                    QMAX: tl.constexpr, FP8: tl.constexpr, PER_CHANNEL: tl.constexpr,
                    OUT_BF16: tl.constexpr, BLOCK: tl.constexpr):
    offs = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    mask = offs < n
    x = tl.load(x_ptr + offs, mask=mask, other=0.0).to(tl.float32)
    if PER_CHANNEL:
        ch = (offs // inner) % channels
        s = tl.load(scale_ptr + ch, mask=mask, other=1.0)
        inv = tl.load(inv_ptr + ch, mask=mask, other=1.0)
    else:
        s = tl.load(scale_ptr)
        inv = tl.load(inv_ptr)
    y = x * inv
    c = tl.minimum(tl.maximum(y, -QMAX), QMAX)
    a = tl.abs(c)
    if FP8:
        r = round_e4m3_abs(a)
    else:
        r = round_half_even_abs(a)
    q = copy_sign(r, c)
    q = tl.where(y != y, y, q)  # NaN stays NaN (min/max would drop it on GPU)
    v = q * s
    if OUT_BF16:  # out_ptr is an int16 view of the bfloat16 output
        tl.store(out_ptr + offs, bf16_bits(v), mask=mask)
    else:
        tl.store(out_ptr + offs, v.to(out_ptr.dtype.element_ty), mask=mask)


@triton.jit
def _fake_quant_bwd(x_ptr, g_ptr, out_ptr, inv_ptr, n, inner, channels,
                    QMAX: tl.constexpr, PER_CHANNEL: tl.constexpr, BLOCK: tl.constexpr):
    offs = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    mask = offs < n
    x = tl.load(x_ptr + offs, mask=mask, other=0.0).to(tl.float32)
    g = tl.load(g_ptr + offs, mask=mask, other=0.0)
    if PER_CHANNEL:
        inv = tl.load(inv_ptr + (offs // inner) % channels, mask=mask, other=1.0)
    else:
        inv = tl.load(inv_ptr)
    keep = tl.abs(x * inv) <= QMAX
    tl.store(out_ptr + offs, tl.where(keep, g, tl.zeros_like(g)), mask=mask)


def _layout(x: Tensor, axis: int | None) -> tuple[int, int, bool]:
    """(inner, channels, per_channel) of a contiguous ``x`` for the channel index computation."""
    if axis is None:
        return max(x.numel(), 1), 1, False
    axis = axis % x.dim()
    inner = math.prod(x.shape[axis + 1:])
    return max(inner, 1), x.shape[axis], True


def _scales(scale: Tensor, x: Tensor) -> tuple[Tensor, Tensor]:
    s = scale.detach().float().reshape(-1).contiguous()
    return s, s.reciprocal()


def _forward(x: Tensor, scale: Tensor, axis: int | None, fp8: bool) -> Tensor:
    xc = x.contiguous()
    out = torch.empty_like(xc)
    n = xc.numel()
    if n == 0:
        return out
    s, inv = _scales(scale, x)
    inner, channels, per_channel = _layout(xc, axis)
    grid = (triton.cdiv(n, BLOCK),)
    bf16 = out.dtype == torch.bfloat16
    _fake_quant_fwd[grid](xc, out.view(torch.int16) if bf16 else out, s, inv, n, inner, channels,
                          QMAX=FP8_E4M3.qmax if fp8 else INT8.qmax, FP8=fp8,
                          PER_CHANNEL=per_channel, OUT_BF16=bf16, BLOCK=BLOCK, num_warps=NUM_WARPS)
    return out


def _backward(x: Tensor, grad: Tensor, scale: Tensor, axis: int | None, fp8: bool) -> Tensor:
    xc, gc = x.contiguous(), grad.contiguous()
    out = torch.empty_like(gc)
    n = xc.numel()
    if n == 0:
        return out
    _, inv = _scales(scale, x)
    inner, channels, per_channel = _layout(xc, axis)
    grid = (triton.cdiv(n, BLOCK),)
    if gc.dtype == torch.bfloat16:  # move the bits: the mask needs no bfloat16 arithmetic
        gc, out_k = gc.view(torch.int16), out.view(torch.int16)
    else:
        out_k = out
    _fake_quant_bwd[grid](xc, gc, out_k, inv, n, inner, channels,
                          QMAX=FP8_E4M3.qmax if fp8 else INT8.qmax, PER_CHANNEL=per_channel,
                          BLOCK=BLOCK, num_warps=NUM_WARPS)
    return out


class _TritonFakeQuant(torch.autograd.Function):
    @staticmethod
    def forward(ctx, x: Tensor, scale: Tensor, axis: int | None, fp8: bool) -> Tensor:  # type: ignore[override]
        ctx.save_for_backward(x, scale)
        ctx.axis, ctx.fp8 = axis, fp8
        return _forward(x, scale, axis, fp8)

    @staticmethod
    def backward(ctx, grad: Tensor):  # type: ignore[override]
        x, scale = ctx.saved_tensors
        return _backward(x, grad, scale, ctx.axis, ctx.fp8), None, None, None


def _run(x: Tensor, scale: Tensor, axis: int | None, fp8: bool) -> Tensor:
    check_inputs(x, scale, axis)
    if x.numel() > MAX_NUMEL:  # int32 indexing: leave giant tensors to the reference
        from ....quant.fake import fake_quant_fp8_ste, fake_quant_int8_ste

        return (fake_quant_fp8_ste if fp8 else fake_quant_int8_ste)(x, scale, axis=axis)
    if torch.is_grad_enabled() and x.requires_grad:
        return _TritonFakeQuant.apply(x, scale, axis, fp8)
    return _forward(x, scale, axis, fp8)


def fake_quant_fp8_triton(x: Tensor, scale: Tensor, *, axis: int | None = None) -> Tensor:
    """Triton ``fake_quant_fp8``: same contract as :func:`libreyolo.quant.fake_quant_fp8_ste`."""
    return _run(x, scale, axis, True)


def fake_quant_int8_triton(x: Tensor, scale: Tensor, *, axis: int | None = None) -> Tensor:
    """Triton ``fake_quant_int8``: same contract as :func:`libreyolo.quant.fake_quant_int8_ste`."""
    return _run(x, scale, axis, False)
