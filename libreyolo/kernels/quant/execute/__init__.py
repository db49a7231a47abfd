"""Execute kernels: finalized quantized models only, no backward (SPEC K-5).

Importing this module registers:

* ``fp8_gemm`` as ``"scaled_mm"`` — FP8 tensor-core GEMM with Triton prologue/epilogue (CUDA
  sm_89+ only; the slot has no reference, K-6);
* ``unpack_weights`` as ``"triton"`` — the packed-weight unpack kernel (CUDA, or CPU under
  ``TRITON_INTERPRET=1``).

The registry imports it on the first resolution of those slots, never under
``LIBREYOLO_KERNELS=off``; without Triton it fails to import and nothing is registered.
"""

from __future__ import annotations

from typing import Any

import torch

from ...registry import register
from .. import platform
from .gemm import applies as gemm_applies
from .gemm import fp8_gemm
from .triton_fused import unpack


def unpack_applies(data: Any = None, scale: Any = None, **_: Any) -> bool:
    """Predicate of the Triton unpack: float8_e4m3fn/int8 data and a float scale on a device
    Triton runs on, in eager mode. Without arguments: whether Triton can run here."""
    if data is None:
        return platform.machine_ok()
    if not isinstance(data, torch.Tensor) or not isinstance(scale, torch.Tensor):
        return False
    if data.dtype not in (torch.float8_e4m3fn, torch.int8) or data.dim() < 1:
        return False
    return platform.eligible(data, scale)


register("fp8_gemm", fp8_gemm, name="scaled_mm", predicate=gemm_applies)
register("unpack_weights", unpack, name="triton", predicate=unpack_applies)
