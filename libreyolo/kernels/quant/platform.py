"""Where the Triton quantization kernels may run (shared by simulate/ and execute/ predicates).

* CUDA (and ROCm) tensors when Triton imports: the normal case (SPEC K-10).
* CPU tensors when ``TRITON_INTERPRET=1``: Triton's interpreter runs the same kernels with
  NumPy, which is how CI checks them bit for bit against the reference. The variable must be
  set before the kernel modules are imported (Triton decides at ``@triton.jit`` time).
"""

from __future__ import annotations

import torch

from ..context import eager_only

#: largest element count the int32-indexed kernels accept (the caller falls back above it).
MAX_NUMEL = 2**31 - 2**20


def interpreting() -> bool:
    """True when Triton kernels run in the interpreter (``TRITON_INTERPRET=1``)."""
    from ...config import env_flag

    return env_flag("TRITON_INTERPRET")


def device_ok(t: torch.Tensor) -> bool:
    """Triton can run on ``t``: a CUDA/ROCm tensor, or any CPU tensor in interpreter mode."""
    if t.device.type == "cuda":
        return True
    return t.device.type == "cpu" and interpreting()


def machine_ok() -> bool:
    """A Triton kernel can run somewhere on this machine (no-argument predicate answer)."""
    return interpreting() or torch.cuda.is_available()


def eligible(*tensors: torch.Tensor) -> bool:
    """Eager execution, and every tensor on one device Triton can run on."""
    if not eager_only():
        return False  # tracing/compiling/exporting keeps the portable math (K-6, K-8)
    if not tensors or not all(isinstance(t, torch.Tensor) for t in tensors):
        return False
    dev = tensors[0].device
    return device_ok(tensors[0]) and all(t.device == dev for t in tensors)

