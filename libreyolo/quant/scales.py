"""Scale computation (amax calibration).

Convention used everywhere: ``q = round(clamp(x * (1 / scale), -qmax, qmax))`` and
``x_hat = q * scale``, with ``scale = amax / qmax`` in float32. An ``amax`` of zero (an all-zero
channel) or a non-finite one gives ``scale = 1`` so that quantization never divides by zero.
The reciprocal is computed once in float32 (``scale.reciprocal()``) and multiplied, both in the
reference and in the kernels, so that every implementation rounds the same products.
"""

from __future__ import annotations

import torch
from torch import Tensor

from ..errors import ConfigError
from .formats import QuantFormat, get_format


def amax(x: Tensor, *, axis: int | None = None) -> Tensor:
    """Largest magnitude of ``x``: a 0-d float32 tensor (``axis=None``) or one per slice along ``axis``.

    Args:
        x (Tensor[...], float): values.
        axis: channel axis for per-channel amax (e.g. 0 for conv/linear weights), or None.

    Returns:
        Tensor[] or Tensor[x.shape[axis]], float32.
    """
    a = x.detach().abs().float()
    if axis is None:
        return a.amax() if a.numel() else torch.zeros((), device=x.device)
    axis = _norm_axis(axis, x.dim())
    dims = [d for d in range(x.dim()) if d != axis]
    return a.amax(dim=dims) if dims else a


def scale_from_amax(a: Tensor, *, fmt: str | QuantFormat) -> Tensor:
    """``amax / qmax`` in float32, with 1.0 where ``amax`` is zero or not finite.

    Example:
        >>> scale_from_amax(torch.tensor(448.0), fmt="fp8_e4m3")
        tensor(1.)
    """
    f = get_format(fmt)
    a = a.detach().float()
    s = a / f.qmax
    ok = torch.isfinite(s) & (s > 0)
    return torch.where(ok, s, torch.ones_like(s))


def compute_scale(x: Tensor, *, fmt: str | QuantFormat, axis: int | None = None) -> Tensor:
    """Min-max scale of ``x`` for ``fmt`` (per tensor, or per channel along ``axis``)."""
    return scale_from_amax(amax(x, axis=axis), fmt=fmt)


def _norm_axis(axis: int, ndim: int) -> int:
    if not -ndim <= axis < ndim:
        raise ConfigError(f"axis {axis} is out of range for a tensor with {ndim} dimension(s)")
    return axis % ndim


def broadcast_scale(scale: Tensor, x: Tensor, axis: int | None) -> Tensor:
    """View ``scale`` (Tensor[] / Tensor[1] / Tensor[C]) so that it broadcasts against ``x``.

    Raises ConfigError when a per-channel scale does not match ``x.shape[axis]``.
    """
    if not isinstance(scale, Tensor):
        raise ConfigError(f"scale must be a float32 tensor, got {type(scale).__name__}")
    if axis is None:
        if scale.numel() != 1:
            raise ConfigError(
                f"a per-tensor scale must have one element, got shape {tuple(scale.shape)}; "
                "pass axis=<channel axis> for per-channel scales"
            )
        return scale.reshape(())
    axis = _norm_axis(axis, x.dim())
    if scale.dim() != 1 or scale.numel() != x.shape[axis]:
        raise ConfigError(
            f"per-channel scale of shape {tuple(scale.shape)} does not match {x.shape[axis]} channels "
            f"on axis {axis} of a tensor of shape {tuple(x.shape)}"
        )
    shape = [1] * x.dim()
    shape[axis] = -1
    return scale.reshape(shape)
