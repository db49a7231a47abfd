"""Triton kernels of the FP8 execute path (finalized models only, no backward; SPEC K-5).

* :func:`quantize_fp8` — the GEMM prologue: Tensor[M, K] float -> Tensor[M, K] float8_e4m3fn
  with a per-tensor scale, the same numbers as the reference fake quantization (the FP8 bytes
  are computed arithmetically, so the kernel also runs in the Triton interpreter).
* :func:`epilogue` — Tensor[M, N] float32 accumulator -> ``acc * (x_scale * w_scale[n]) + bias[n]``
  followed by an activation (none, relu, silu), written in the output dtype.
* :func:`unpack` — the packed-weight unpack kernel (``unpack_weights`` slot): FP8/INT8 bytes
  times a per-output-channel scale, bit-identical to ``unpack_weight_reference``.
"""

from __future__ import annotations

import math

import torch
import triton
import triton.language as tl
from torch import Tensor

from ....errors import ConfigError
from ....quant.formats import FP8_E4M3
from ..triton_fp8 import bf16_bits, decode_e4m3, encode_e4m3, round_e4m3_abs

BLOCK = 2048
NUM_WARPS = 8
ACTIVATIONS = {"none": 0, "relu": 1, "silu": 2}


@triton.jit
def _quantize_fp8_kernel(x_ptr, out_ptr, inv_ptr, n, QMAX: tl.constexpr, BLOCK: tl.constexpr):
    offs = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    mask = offs < n
    x = tl.load(x_ptr + offs, mask=mask, other=0.0).to(tl.float32)
    y = x * tl.load(inv_ptr)
    c = tl.minimum(tl.maximum(y, -QMAX), QMAX)
    r = round_e4m3_abs(tl.abs(c))
    code = encode_e4m3(r, tl.where(y != y, y, c))
    tl.store(out_ptr + offs, code.to(tl.uint8), mask=mask)


@triton.jit
def _epilogue_kernel(acc_ptr, out_ptr, xs_ptr, ws_ptr, bias_ptr, n, cols,
                     HAS_BIAS: tl.constexpr, DEQUANT: tl.constexpr, ACT: tl.constexpr,
                     OUT_BF16: tl.constexpr, BLOCK: tl.constexpr):
    offs = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    mask = offs < n
    col = offs % cols
    v = tl.load(acc_ptr + offs, mask=mask, other=0.0).to(tl.float32)
    if DEQUANT:
        v = v * (tl.load(xs_ptr) * tl.load(ws_ptr + col, mask=mask, other=1.0))
    if HAS_BIAS:
        v = v + tl.load(bias_ptr + col, mask=mask, other=0.0).to(tl.float32)
    if ACT == 1:
        v = tl.maximum(v, 0.0)
    elif ACT == 2:
        v = v / (1.0 + tl.exp(-v))
    if OUT_BF16:
        tl.store(out_ptr + offs, bf16_bits(v), mask=mask)
    else:
        tl.store(out_ptr + offs, v.to(out_ptr.dtype.element_ty), mask=mask)


@triton.jit
def _unpack_kernel(data_ptr, scale_ptr, out_ptr, n, inner,
                   FP8: tl.constexpr, OUT_BF16: tl.constexpr, BLOCK: tl.constexpr):
    offs = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    mask = offs < n
    raw = tl.load(data_ptr + offs, mask=mask, other=0)
    if FP8:
        v = decode_e4m3(raw.to(tl.int32) & 255)
    else:
        v = raw.to(tl.float32)
    v = v * tl.load(scale_ptr + offs // inner, mask=mask, other=1.0)
    if OUT_BF16:
        tl.store(out_ptr + offs, bf16_bits(v), mask=mask)
    else:
        tl.store(out_ptr + offs, v.to(out_ptr.dtype.element_ty), mask=mask)


def _grid(n: int) -> tuple[int]:
    return (triton.cdiv(n, BLOCK),)


def _out_view(out: Tensor) -> tuple[Tensor, bool]:
    bf16 = out.dtype == torch.bfloat16
    return (out.view(torch.int16) if bf16 else out), bf16


def quantize_fp8(x: Tensor, scale: Tensor) -> Tensor:
    """Quantize activations for the FP8 GEMM.

    Args:
        x (Tensor[M, K], float32/float16/bfloat16); scale (Tensor[] or Tensor[1], float32).

    Returns:
        Tensor[M, K] float8_e4m3fn, equal to
        ``clamp(x.float() * scale.reciprocal(), -448, 448).to(torch.float8_e4m3fn)``.
    """
    xc = x.contiguous()
    out = torch.empty(xc.shape, dtype=torch.uint8, device=x.device)
    n = xc.numel()
    if n:
        inv = scale.detach().float().reshape(1).reciprocal()
        _quantize_fp8_kernel[_grid(n)](xc, out, inv, n, QMAX=FP8_E4M3.qmax, BLOCK=BLOCK,
                                       num_warps=NUM_WARPS)
    return out.view(torch.float8_e4m3fn)


def epilogue(acc: Tensor, *, x_scale: Tensor | None, w_scale: Tensor | None, bias: Tensor | None,
             activation: str = "none", out_dtype: torch.dtype = torch.bfloat16) -> Tensor:
    """Dequantize (when both scales are given), add bias, apply the activation, cast.

    Args:
        acc (Tensor[M, N], float32 or bfloat16): GEMM accumulator.
        x_scale (Tensor[] float32 | None); w_scale (Tensor[N] float32 | None); bias (Tensor[N] | None).
        activation: ``"none"``, ``"relu"`` or ``"silu"``.

    Returns:
        Tensor[M, N] of ``out_dtype``.
    """
    if activation not in ACTIVATIONS:
        raise ConfigError(f"unknown epilogue activation {activation!r}; choose one of {sorted(ACTIVATIONS)}")
    accc = acc.contiguous()
    m, cols = accc.shape
    out = torch.empty((m, cols), dtype=out_dtype, device=acc.device)
    n = accc.numel()
    if n == 0:
        return out
    dequant = x_scale is not None and w_scale is not None
    dummy = accc.new_ones((1,), dtype=torch.float32)
    xs = x_scale.detach().float().reshape(1) if dequant else dummy
    ws = w_scale.detach().float().reshape(-1).contiguous() if dequant else dummy
    b = bias.detach().contiguous() if bias is not None else dummy
    ov, bf16 = _out_view(out)
    _epilogue_kernel[_grid(n)](accc, ov, xs, ws, b, n, cols, HAS_BIAS=bias is not None,
                               DEQUANT=dequant, ACT=ACTIVATIONS[activation], OUT_BF16=bf16,
                               BLOCK=BLOCK, num_warps=NUM_WARPS)
    return out


def unpack(data: Tensor, scale: Tensor, *, dtype: torch.dtype | None = None) -> Tensor:
    """Unpack a packed weight (Tensor[Cout, ...] float8_e4m3fn or int8, Tensor[Cout] float32)
    into Tensor[Cout, ...] of ``dtype`` (float32 by default); bit-identical to the reference."""
    dtype = dtype or torch.float32
    if data.dtype not in (torch.float8_e4m3fn, torch.int8):
        raise ConfigError(f"packed weights are float8_e4m3fn or int8, got {data.dtype}")
    if scale.numel() != data.shape[0]:
        raise ConfigError(f"{scale.numel()} scales for {data.shape[0]} output channels")
    dc = data.contiguous()
    fp8 = dc.dtype == torch.float8_e4m3fn
    raw = dc.view(torch.uint8) if fp8 else dc
    out = torch.empty(dc.shape, dtype=dtype, device=data.device)
    n = dc.numel()
    if n:
        inner = max(math.prod(dc.shape[1:]), 1)
        ov, bf16 = _out_view(out)
        _unpack_kernel[_grid(n)](raw, scale.detach().float().contiguous(), ov, n, inner,
                                 FP8=fp8, OUT_BF16=bf16, BLOCK=BLOCK, num_warps=NUM_WARPS)
    return out
