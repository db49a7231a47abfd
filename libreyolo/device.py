"""Device parsing and the one autocast helper every forward uses.

``select_device`` turns what users type (``None``, ``"cpu"``, ``0``, ``"0"``, ``"cuda:1"``) into a
``torch.device`` with one clear error per mistake. ``autocast`` is the single way mixed precision is
entered: a no-op for ``None``/float32, else ``torch.autocast`` with the weight-cast cache on or off
as the caller needs (off inside CUDA-graph capture and prediction, whose graphs must not keep cast
copies alive between calls; on in training and validation, where one forward reuses the casts).
"""

from __future__ import annotations

import contextlib
from typing import Any

import torch
from torch import nn

from .errors import ConfigError


def select_device(device: str | int | torch.device | None) -> torch.device:
    """Parse a device argument: None/'' (CUDA if present, else CPU), 'cpu', 'cuda', 0, '0', 'cuda:1'.

    Example:
        >>> select_device("cpu")
        device(type='cpu')
    """
    if device is None or device == "":
        return torch.device("cuda:0" if torch.cuda.is_available() else "cpu")
    if isinstance(device, torch.device):
        d = device
    elif isinstance(device, int) or (isinstance(device, str) and device.isdigit()):
        d = torch.device(f"cuda:{int(device)}")
    elif isinstance(device, str):
        try:
            d = torch.device(device)
        except RuntimeError as e:
            raise ConfigError(f"invalid device {device!r}: {e}") from e
    else:
        raise ConfigError(f"invalid device {device!r}")
    if d.type == "cuda":
        if not torch.cuda.is_available():
            raise ConfigError(f"device {device!r} asks for CUDA, but torch sees no CUDA GPU; use device='cpu'")
        if d.index is None:
            d = torch.device("cuda", torch.cuda.current_device())
        if d.index >= torch.cuda.device_count():
            raise ConfigError(f"device {device!r}: only {torch.cuda.device_count()} CUDA device(s) present")
    return d


def autocast(device: torch.device | str, dtype: torch.dtype | None, *, cache: bool = False) -> Any:
    """Mixed precision for a forward: ``nullcontext`` for ``None``/float32, else ``torch.autocast``.

    Example:
        >>> with autocast(torch.device("cpu"), None):
        ...     pass
    """
    if dtype is None or dtype == torch.float32:
        return contextlib.nullcontext()
    kind = device.type if isinstance(device, torch.device) else torch.device(device).type
    return torch.autocast(device_type=kind, dtype=dtype, cache_enabled=cache)


def first_parameter(module: nn.Module) -> nn.Parameter | None:
    """``next(module.parameters(), None)`` without building the generator chain: the module's own
    parameters first, then its children depth-first (the order ``parameters()`` yields), so a
    model's device is read in about a microsecond instead of tens (it is read on every predict)."""
    for p in module._parameters.values():
        if p is not None:
            return p
    for child in module._modules.values():
        if child is not None:
            p = first_parameter(child)
            if p is not None:
                return p
    return None
