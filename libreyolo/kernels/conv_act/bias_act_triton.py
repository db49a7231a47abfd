"""In-tree Triton provider of the ``bias_act`` slot (contract: :mod:`libreyolo.kernels.conv_act`).

One program per ``BLOCK`` elements of the flat output; the channel of an element is
``i % C`` in channels-last memory and ``(i // (H * W)) % C`` in NCHW. (About 2.1 us per launch in
a batch-1 yolo9-t replay where Inductor's fused epilogues take 1.3-1.5. A version on 2-D tiles of
2,048 elements without the per-element 64-bit modulo was slower, 2.55 us, on the small maps of a
batch-1 network: ``benchmarks/results/profile/tiled/``. A 1-D version with 32-bit indexing and
512-element blocks on small maps is the next candidate; it was not run on a GPU, so this one,
whose bits the GPU tests hold, stays.) Numerics follow ATen's two
kernels: the sum is formed in float32 and rounded to the output dtype (the in-place add), then
SiLU is computed in float32 with libdevice ``expf`` and a correctly rounded division (ATen's
``x / (1 + exp(-x))``), rounded once more.

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
BLOCK = 1024


@triton.jit
def _bias_silu(y_ptr, b_ptr, n, C, HW, CHANNELS_LAST: tl.constexpr, LIBDEVICE: tl.constexpr,
               BLOCK: tl.constexpr):
    offs = tl.program_id(0).to(tl.int64) * BLOCK + tl.arange(0, BLOCK)
    mask = offs < n
    if CHANNELS_LAST:
        c = offs % C
    else:
        c = (offs // HW) % C
    y = tl.load(y_ptr + offs, mask=mask, other=0.0)
    b = tl.load(b_ptr + c, mask=mask, other=0.0)
    v = (y.to(tl.float32) + b.to(tl.float32)).to(y.dtype).to(tl.float32)
    if LIBDEVICE:  # expf as ATen's kernel calls it
        e = libdevice.exp(-v)
    else:  # the CPU interpreter has no libdevice: numpy's exp (tests of the indexing, not the bits)
        e = tl.exp(-v)
    out = tl.math.div_rn(v, 1.0 + e)
    tl.store(y_ptr + offs, out.to(y.dtype), mask=mask)


def bias_act_triton(y: Tensor, bias: Tensor) -> Tensor:
    """The fused bias add + SiLU, in place on ``y`` (see the module docstring)."""
    n, c = y.numel(), int(y.shape[1])
    if bias.numel() != c or not (y.is_contiguous() or y.is_contiguous(memory_format=torch.channels_last)):
        from . import bias_act_reference  # sizes the predicate does not see: the portable path

        return bias_act_reference(y, bias)
    if n == 0:
        return y
    channels_last = not y.is_contiguous()
    b = bias if bias.dtype == y.dtype else bias.to(y.dtype)
    hw = int(y.shape[2]) * int(y.shape[3])
    with torch.cuda.device(y.device) if y.is_cuda else nullcontext():
        _bias_silu[(triton.cdiv(n, BLOCK),)](y, b, n, c, hw, CHANNELS_LAST=channels_last,
                                             LIBDEVICE=not interpreting(), BLOCK=BLOCK)
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
