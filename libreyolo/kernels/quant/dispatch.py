"""Quantization ops through the kernel registry: the fastest implementation that applies.

:mod:`libreyolo.quant` defines what the numbers mean (``fake_quant_*_reference``,
``unpack_weight_reference``) and imports no kernel; these two verbs run the same math through
the ``fake_quant_fp8`` / ``fake_quant_int8`` / ``unpack_weights`` slots (Triton when it applies,
else the reference, with the K-7 fall-back).
"""

from __future__ import annotations

import torch
from torch import Tensor

from ...quant.fake import check_inputs
from ...quant.formats import FP8_E4M3, get_format
from ..registry import dispatch


def fake_quant(x: Tensor, scale: Tensor, *, fmt: str, axis: int | None = None) -> Tensor:
    """Fake-quantize through the kernel registry (the fastest implementation that applies).

    Args:
        x (Tensor[...], float32/float16/bfloat16); scale as in
            :func:`libreyolo.quant.fake_quant_fp8_reference`.
        fmt: ``"fp8_e4m3"`` (or ``"fp8"``) or ``"int8"``.

    Example:
        >>> fake_quant(torch.tensor([3.3]), torch.tensor(1.0), fmt="fp8")
        tensor([3.2500])
    """
    op = "fake_quant_fp8" if get_format(fmt) is FP8_E4M3 else "fake_quant_int8"
    check_inputs(x, scale, axis)
    return dispatch(op, x, scale, axis=axis)


def unpack_weight(data: Tensor, scale: Tensor, *, dtype: torch.dtype = torch.float32) -> Tensor:
    """Dequantize a packed weight through the kernel registry (``unpack_weights`` slot); same
    result as :func:`libreyolo.quant.unpack_weight_reference`."""
    return dispatch("unpack_weights", data, scale, dtype=dtype)
