"""Simulate kernels: Triton fake quantization with straight-through backward (SPEC K-5).

Importing this module registers ``fake_quant_fp8`` and ``fake_quant_int8`` implementations
named ``"triton"``. The registry imports it on the first resolution of those slots, never under
``LIBREYOLO_KERNELS=off``; it fails to import (and nothing is registered) without Triton.
"""

from __future__ import annotations

from typing import Any

import torch

from ...registry import register
from .. import platform
from .triton_fake_quant import fake_quant_fp8_triton, fake_quant_int8_triton

NAME = "triton"
DTYPES = (torch.float32, torch.float16, torch.bfloat16)


def applies(x: Any = None, scale: Any = None, *, axis: int | None = None) -> bool:
    """Predicate: float32/float16/bfloat16 tensor and float scale on a device Triton runs on,
    in eager mode. Without arguments: whether Triton can run on this machine at all."""
    if x is None:
        return platform.machine_ok()
    if not isinstance(x, torch.Tensor) or not isinstance(scale, torch.Tensor):
        return False
    if x.dtype not in DTYPES or not scale.is_floating_point():
        return False
    return platform.eligible(x, scale)


register("fake_quant_fp8", fake_quant_fp8_triton, name=NAME, predicate=applies)
register("fake_quant_int8", fake_quant_int8_triton, name=NAME, predicate=applies)
