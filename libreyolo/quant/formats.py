"""Quantization formats: the numeric grids that the reference and every kernel agree on.

Two formats are defined:

* ``fp8_e4m3`` — OCP FP8 E4M3 "fn" (``torch.float8_e4m3fn``): 1 sign, 4 exponent (bias 7) and
  3 mantissa bits, no infinities, largest finite value 448, smallest normal 2**-6, subnormal
  spacing 2**-9. Rounding is round-to-nearest-even, saturating at +-448.
* ``int8`` — symmetric signed 8-bit integers on ``[-127, 127]`` (``-128`` is never produced so
  that the grid is symmetric), rounding half to even.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Literal

import torch

from ..errors import ConfigError

FormatName = Literal["fp8_e4m3", "int8"]


@dataclass(frozen=True, kw_only=True)
class QuantFormat:
    """One quantized number format.

    Attributes:
        name: ``"fp8_e4m3"`` or ``"int8"``.
        qmax: largest representable magnitude on the quantized grid (448.0 or 127.0).
        storage: dtype of packed tensors (``torch.float8_e4m3fn`` or ``torch.int8``).
    """

    name: str
    qmax: float
    storage: torch.dtype


FP8_E4M3 = QuantFormat(name="fp8_e4m3", qmax=448.0, storage=torch.float8_e4m3fn)
INT8 = QuantFormat(name="int8", qmax=127.0, storage=torch.int8)

FORMATS: dict[str, QuantFormat] = {f.name: f for f in (FP8_E4M3, INT8)}
#: dtypes the fake-quant functions accept (computation is always in float32).
SUPPORTED_DTYPES = (torch.float32, torch.float16, torch.bfloat16)


def get_format(name: str | QuantFormat) -> QuantFormat:
    """Look a format up by name (``"fp8_e4m3"``/``"fp8"`` or ``"int8"``)."""
    if isinstance(name, QuantFormat):
        return name
    key = {"fp8": "fp8_e4m3", "e4m3": "fp8_e4m3"}.get(name, name)
    if key not in FORMATS:
        raise ConfigError(f"unknown quantization format {name!r}; known: {', '.join(FORMATS)} (or 'fp8')")
    return FORMATS[key]
