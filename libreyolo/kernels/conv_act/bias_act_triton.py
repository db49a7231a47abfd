"""In-tree Triton provider of the ``bias_act`` slot (contract: :mod:`libreyolo.kernels.conv_act`).

The output is walked as a 2-D tile grid, so no element computes its channel with a 64-bit
division: in channels-last memory the tensor is a ``(N*H*W, C)`` matrix (a tile is ``BLOCK_P``
pixels by ``BLOCK_C`` channels, the bias loaded once per tile column), in NCHW a
``(N*C, H*W)`` matrix (one row per image and channel, its bias one scalar per program). Offsets
are 32-bit unless the tensor has 2**31 elements or more. Numerics follow ATen's two kernels: the
sum is formed in float32 and rounded to the output dtype (the in-place add), then SiLU is
computed in float32 with libdevice ``expf`` and a correctly rounded division (ATen's
``x / (1 + exp(-x))``), rounded once more. (The first version indexed a flat block with a
64-bit modulo per element: about 2.1 us per kernel where Inductor's fused epilogues took 1.5,
``benchmarks/results/profile/kernel_census_yolo9_t.md``.)

Eligibility (the predicate): plain eager execution or a CUDA-graph capture (no tracing,
compiling or export), a 4-D floating tensor on CUDA (or on the CPU under ``TRITON_INTERPRET=1``
when the provider is asked for by name, ``LIBREYOLO_KERNELS=triton``) that is contiguous in
NCHW or channels-last layout, a 1-D bias of its channel count on the same device, and no
autograd (the kernel has no backward).
"""

from __future__ import annotations

from contextlib import nullcontext

import torch
import triton
import triton.language as tl
from torch import Tensor
from triton.language.extra import libdevice

from .. import registry
from ..attention.msda_triton import cpu_interpreter_asked, device_ok, interpreting
from ..context import eager_only

NAME = "triton"
OP = "bias_act"
DTYPES = (torch.float16, torch.bfloat16, torch.float32)

@triton.jit
def _silu(v, LIBDEVICE: tl.constexpr):
    if LIBDEVICE:  # expf as ATen's kernel calls it
        e = libdevice.exp(-v)
    else:  # the CPU interpreter has no libdevice: numpy's exp (tests of the indexing, not the bits)
        e = tl.exp(-v)
    return tl.math.div_rn(v, 1.0 + e)


@triton.jit
def _bias_silu_cl(y_ptr, b_ptr, P, C, WIDE: tl.constexpr, LIBDEVICE: tl.constexpr,
                  BLOCK_P: tl.constexpr, BLOCK_C: tl.constexpr):
    """Channels-last: y is a row-major (P, C) matrix, P = N*H*W."""
    p = tl.program_id(0) * BLOCK_P + tl.arange(0, BLOCK_P)
    c = tl.program_id(1) * BLOCK_C + tl.arange(0, BLOCK_C)
    cmask = c < C
    if WIDE:
        offs = p.to(tl.int64)[:, None] * C + c[None, :]
    else:
        offs = p[:, None] * C + c[None, :]
    mask = (p < P)[:, None] & cmask[None, :]
    y = tl.load(y_ptr + offs, mask=mask, other=0.0)
    b = tl.load(b_ptr + c, mask=cmask, other=0.0)
    v = (y.to(tl.float32) + b.to(tl.float32)[None, :]).to(y.dtype).to(tl.float32)
    tl.store(y_ptr + offs, _silu(v, LIBDEVICE).to(y.dtype), mask=mask)


@triton.jit
def _bias_silu_nchw(y_ptr, b_ptr, HW, C, WIDE: tl.constexpr, LIBDEVICE: tl.constexpr, BLOCK: tl.constexpr):
    """NCHW: y is a row-major (N*C, HW) matrix; program (row, j) takes the j-th BLOCK elements of
    a row (rows on the grid's first axis: N*C can pass the 65,535 limit of the others)."""
    row = tl.program_id(0)
    col = tl.program_id(1) * BLOCK + tl.arange(0, BLOCK)
    if WIDE:
        offs = row.to(tl.int64) * HW + col
    else:
        offs = row * HW + col
    mask = col < HW
    y = tl.load(y_ptr + offs, mask=mask, other=0.0)
    b = tl.load(b_ptr + row % C)
    v = (y.to(tl.float32) + b.to(tl.float32)).to(y.dtype).to(tl.float32)
    tl.store(y_ptr + offs, _silu(v, LIBDEVICE).to(y.dtype), mask=mask)


def _cl_tiles(c: int) -> tuple[int, int]:
    """(BLOCK_P, BLOCK_C) of a channels-last tile of about 2,048 elements: every channel of up to
    128 in one tile column (a power of two at least 16 wide), pixels filling the rest."""
    block_c = min(128, max(16, triton.next_power_of_2(c)))
    return 2048 // block_c, block_c


def bias_act_triton(y: Tensor, bias: Tensor) -> Tensor:
    """The fused bias add + SiLU, in place on ``y`` (see the module docstring)."""
    n, c = y.numel(), int(y.shape[1])
    if bias.numel() != c or not (y.is_contiguous() or y.is_contiguous(memory_format=torch.channels_last)):
        from . import bias_act_reference  # sizes the predicate does not see: the portable path

        return bias_act_reference(y, bias)
    if n == 0:
        return y
    b = bias if bias.dtype == y.dtype else bias.to(y.dtype)
    hw = int(y.shape[2]) * int(y.shape[3])
    wide = n >= 2 ** 31
    with torch.cuda.device(y.device) if y.is_cuda else nullcontext():
        if y.is_contiguous():  # NCHW (also a 1x1 map or a single channel, where both layouts agree)
            block = min(1024, max(128, triton.next_power_of_2(hw)))
            _bias_silu_nchw[(n // hw, triton.cdiv(hw, block))](y, b, hw, c, WIDE=wide, LIBDEVICE=not interpreting(),
                                                              BLOCK=block)
        else:
            p = n // c
            bp, bc = _cl_tiles(c)
            _bias_silu_cl[(triton.cdiv(p, bp), triton.cdiv(c, bc))](y, b, p, c, WIDE=wide,
                                                                   LIBDEVICE=not interpreting(), BLOCK_P=bp,
                                                                   BLOCK_C=bc)
    return y


def applies(y: Tensor | None = None, bias: Tensor | None = None) -> bool:
    """Predicate of the ``"triton"`` implementation (module docstring). With no arguments:
    whether the provider can run on this machine at all."""
    if not eager_only():
        return False
    if y is None:
        return torch.cuda.is_available() or cpu_interpreter_asked()
    if not isinstance(y, Tensor) or not isinstance(bias, Tensor):
        return False
    if y.dim() != 4 or bias.dim() != 1 or y.dtype not in DTYPES or not bias.is_floating_point():
        return False
    if y.requires_grad:  # autograd would need a backward the kernel does not have
        return False
    if bias.device != y.device or not device_ok(y):
        return False
    return y.is_contiguous() or y.is_contiguous(memory_format=torch.channels_last)


registry.register(OP, bias_act_triton, name=NAME, predicate=applies)
