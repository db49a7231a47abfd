"""FP8 tensor-core GEMM through ``torch._scaled_mm`` (Ada sm_89 / Hopper sm_90 and newer).

``fp8_gemm(x, w, x_scale, w_scale, bias)`` computes ``dequant(quant(x)) @ dequant(w).T + bias``:

1. prologue (Triton): ``x`` -> FP8 with the calibrated per-tensor ``x_scale``;
2. GEMM: ``torch._scaled_mm`` on FP8 operands, accumulating in float32, either
   * ``"tensorwise"`` (default): unit scales, float32 output, then
   * ``"rowwise"`` (sm_90+): the scales applied inside the GEMM (``x_scale`` per row,
     ``w_scale`` per column), bfloat16 output;
3. epilogue (Triton): dequant scales (tensorwise), bias, activation, cast to ``x.dtype``.

The slot has no reference (K-6): callers check ``kernels.resolve("fp8_gemm", ...)`` and keep
their portable path (unpacked weight + fake-quantized input + float matmul). Results differ
from that path only by float32 accumulation order (and the bfloat16 rounding of the rowwise
output), not by quantization.
"""

from __future__ import annotations

from typing import Any, Literal

import torch
from torch import Tensor

from ....errors import ConfigError
from .. import platform
from .triton_fused import epilogue, quantize_fp8

Mode = Literal["tensorwise", "rowwise"]
MIN_CAPABILITY = (8, 9)
ROWWISE_CAPABILITY = (9, 0)


def capability_ok(device: torch.device, minimum: tuple[int, int] = MIN_CAPABILITY) -> bool:
    """The CUDA device has FP8 tensor cores (compute capability >= ``minimum``)."""
    if device.type != "cuda" or not torch.cuda.is_available() or torch.version.hip is not None:
        return False
    return torch.cuda.get_device_capability(device) >= minimum


def fp8_gemm(x: Tensor, w: Tensor, x_scale: Tensor, w_scale: Tensor, bias: Tensor | None = None,
             *, activation: str = "none", mode: Mode = "tensorwise") -> Tensor:
    """FP8 GEMM with fused prologue and epilogue.

    Args:
        x (Tensor[M, K], float32/float16/bfloat16, CUDA): activations.
        w (Tensor[N, K], float8_e4m3fn, CUDA): packed weight (K and N multiples of 16).
        x_scale (Tensor[] float32): per-tensor activation scale.
        w_scale (Tensor[N] float32): per-output-channel weight scale.
        bias (Tensor[N] | None).
        activation: ``"none"``, ``"relu"`` or ``"silu"`` applied in the epilogue.
        mode: ``"tensorwise"`` or ``"rowwise"`` (see the module doc).

    Returns:
        Tensor[M, N] of ``x.dtype``.
    """
    if x.dim() != 2 or w.dim() != 2 or x.shape[1] != w.shape[1]:
        raise ConfigError(f"fp8_gemm needs x[M, K] and w[N, K], got {tuple(x.shape)} and {tuple(w.shape)}")
    if w.dtype != torch.float8_e4m3fn:
        raise ConfigError(f"fp8_gemm needs a float8_e4m3fn weight, got {w.dtype}")
    m, n = x.shape[0], w.shape[0]
    xq = quantize_fp8(x, x_scale)  # (M, K) fp8, row-major
    wt = w.t()  # (K, N) column-major view, as _scaled_mm wants its second operand
    if mode == "rowwise":
        sa = x_scale.detach().float().reshape(1, 1).expand(m, 1).contiguous()
        sb = w_scale.detach().float().reshape(1, n).contiguous()
        acc = torch._scaled_mm(xq, wt, scale_a=sa, scale_b=sb, out_dtype=torch.bfloat16)
        return epilogue(acc, x_scale=None, w_scale=None, bias=bias, activation=activation, out_dtype=x.dtype)
    if mode != "tensorwise":
        raise ConfigError(f"fp8_gemm mode must be 'tensorwise' or 'rowwise', got {mode!r}")
    one = torch.ones((), dtype=torch.float32, device=x.device)
    acc = torch._scaled_mm(xq, wt, scale_a=one, scale_b=one, out_dtype=torch.float32)
    return epilogue(acc, x_scale=x_scale, w_scale=w_scale, bias=bias, activation=activation, out_dtype=x.dtype)


def applies(x: Any = None, w: Any = None, x_scale: Any = None, w_scale: Any = None,
            bias: Any = None, **_: Any) -> bool:
    """Predicate of the ``fp8_gemm`` slot: CUDA sm_89+, eager mode, ``torch._scaled_mm``
    present, x float32/float16/bfloat16 [M, K] and w float8_e4m3fn [N, K] with K, N multiples
    of 16. Without arguments: whether this machine has FP8 tensor cores."""
    if not hasattr(torch, "_scaled_mm"):
        return False
    if x is None:
        return torch.cuda.is_available() and capability_ok(torch.device("cuda", torch.cuda.current_device()))
    if not isinstance(x, Tensor) or not isinstance(w, Tensor) or x.device.type != "cuda":
        return False
    if x.dtype not in (torch.float32, torch.float16, torch.bfloat16) or w.dtype != torch.float8_e4m3fn:
        return False
    if x.dim() != 2 or w.dim() != 2 or x.shape[1] % 16 or w.shape[0] % 16:
        return False
    return platform.eligible(x, w) and capability_ok(x.device)
