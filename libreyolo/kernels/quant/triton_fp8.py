"""Triton device helpers for the FP8 E4M3 grid, shared by the simulate and execute kernels.

Rounding is done with integer arithmetic on the float32 bit pattern (normal range) and an exact
add-and-subtract of 2**23 (subnormal range, spacing 2**-9), so that it equals
``torch.Tensor.to(torch.float8_e4m3fn)`` (round to nearest, ties to even) on every GPU
generation and in the interpreter, without relying on the hardware FP8 conversion.
"""

from __future__ import annotations

import triton
import triton.language as tl


@triton.jit
def round_e4m3_abs(a):
    """|y| (float32, 0 <= a <= 448, not NaN) rounded to the nearest E4M3 value, ties to even."""
    bits = a.to(tl.int32, bitcast=True)
    # normal range [2**-6, 448]: keep 3 of the 23 mantissa bits, round half to even
    rb = (bits + 0x7FFFF + ((bits >> 20) & 1)) & -1048576  # -1048576 == ~0xFFFFF
    normal = rb.to(tl.float32, bitcast=True)
    # subnormal range [0, 2**-6): multiples of 2**-9 (a * 512 is exact, 2**23 forces RNE)
    t = a * 512.0
    sub = ((t + 8388608.0) - 8388608.0) * 0.001953125
    return tl.where(a >= 0.015625, normal, sub)


@triton.jit
def round_half_even_abs(a):
    """|y| (float32, 0 <= a < 2**22) rounded to an integer, ties to even."""
    return (a + 8388608.0) - 8388608.0


@triton.jit
def copy_sign(mag, y):
    """``mag`` (>= 0) with the sign bit of ``y`` (keeps -0.0)."""
    yb = y.to(tl.int32, bitcast=True)
    sign = yb - (yb & 0x7FFFFFFF)  # 0x80000000 or 0, without an int64 literal
    return (mag.to(tl.int32, bitcast=True) | sign).to(tl.float32, bitcast=True)


@triton.jit
def encode_e4m3(r, y):
    """E4M3 byte (int32 in 0..255) of ``r`` = |y| already on the grid, signed like ``y``; NaN -> 0x7F."""
    bits = r.to(tl.int32, bitcast=True)
    normal = (((bits >> 23) - 120) << 3) | ((bits >> 20) & 7)
    sub = (r * 512.0).to(tl.int32)
    code = tl.where(r >= 0.015625, normal, sub)
    code = tl.where(y != y, 0x7F, code)
    return code | tl.where(y.to(tl.int32, bitcast=True) < 0, 128, 0)


@triton.jit
def decode_e4m3(b):
    """float32 value of E4M3 bytes ``b`` (int32 in 0..255)."""
    e = (b >> 3) & 15
    m = b & 7
    normal = (((e + 120) << 23) | (m << 20)).to(tl.float32, bitcast=True)
    sub = m.to(tl.float32) * 0.001953125
    v = tl.where(e == 0, sub, normal)
    v = tl.where((e == 15) & (m == 7), float("nan"), v)
    # The sign goes in as a bit: Triton lowers unary minus to ``0 - v`` on GPUs, which turns the
    # byte 0x80 (negative zero) into +0.0.
    sign = ((b >> 7) & 1) << 31
    return (v.to(tl.int32, bitcast=True) | sign).to(tl.float32, bitcast=True)


@triton.jit
def bf16_bits(v):
    """bfloat16 bit pattern (int16) of float32 ``v``, round to nearest even, NaN kept.

    Done by hand because the Triton interpreter truncates float32 -> bfloat16 conversions while
    GPUs (and torch) round to nearest even; stores go through an int16 view of the output.
    """
    b = v.to(tl.int32, bitcast=True)
    r = (b + 0x7FFF + ((b >> 16) & 1)) >> 16
    r = tl.where(v != v, (b >> 16) | 0x40, r)  # quiet NaN, sign kept
    return r.to(tl.int16)
