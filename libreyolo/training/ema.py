"""Exponential moving average of a network's weights, with a decay ramp.

decay(n) = decay * (1 - exp(-n / tau)) after n updates, so early (noisy) weights fade fast.
Every floating-point tensor of the state dict is averaged, BatchNorm running statistics included;
integer buffers (BatchNorm's ``num_batches_tracked``) are copied.

The update is a handful of multi-tensor kernels: the pairs of (EMA tensor, source tensor) are
listed once, on the first update (and again only if a different network is passed), then each
update is one ``torch._foreach_lerp_`` over the floating tensors and one ``torch._foreach_copy_``
over the integer ones; no ``state_dict()`` walk per step.
"""

from __future__ import annotations

import copy
import math
from typing import Any

import torch
from torch import nn


class ModelEMA:
    """EMA copy of ``net`` (``self.module``, eval mode, no grad).

    Example:
        >>> ema = ModelEMA(net)  # doctest: +SKIP
        >>> ema.update(net)  # after each optimiser step  # doctest: +SKIP
    """

    def __init__(self, net: nn.Module, *, decay: float = 0.9999, tau: float = 2000.0, updates: int = 0) -> None:
        self.module = copy.deepcopy(net).eval()
        for p in self.module.parameters():
            p.requires_grad_(False)
        self.decay, self.tau, self.updates = decay, tau, updates
        self._pairs: tuple[int, list[torch.Tensor], list[torch.Tensor], list[torch.Tensor], list[torch.Tensor]] | None
        self._pairs = None  # (id(net), ema floats, net floats, ema ints, net ints)

    def current_decay(self) -> float:
        return self.decay * (1 - math.exp(-self.updates / self.tau))

    def _tensor_pairs(self, net: nn.Module) -> tuple[list[torch.Tensor], ...]:
        """(ema floats, net floats, ema ints, net ints), matched by state-dict name; cached per net."""
        if self._pairs is not None and self._pairs[0] == id(net):
            return self._pairs[1:]
        src = net.state_dict(keep_vars=True)
        ema_f, src_f, ema_i, src_i = [], [], [], []
        for k, v in self.module.state_dict(keep_vars=True).items():
            s = src[k].detach()
            if v.dtype.is_floating_point:
                if s.dtype != v.dtype or s.device != v.device or s.shape != v.shape:
                    raise ValueError(f"EMA tensor {k!r} ({v.dtype}, {v.device}, {tuple(v.shape)}) does not match the "
                                     f"network's ({s.dtype}, {s.device}, {tuple(s.shape)})")
                ema_f.append(v.detach())
                src_f.append(s)
            else:
                ema_i.append(v.detach())
                src_i.append(s)
        self._pairs = (id(net), ema_f, src_f, ema_i, src_i)
        return ema_f, src_f, ema_i, src_i

    @torch.no_grad()
    def update(self, net: nn.Module) -> None:
        self.updates += 1
        d = self.current_decay()
        ema_f, src_f, ema_i, src_i = self._tensor_pairs(net)
        if ema_f:
            torch._foreach_lerp_(ema_f, src_f, 1.0 - d)  # a few multi-tensor kernels instead of ~N
        if ema_i:
            torch._foreach_copy_(ema_i, src_i)

    def state_dict(self) -> dict[str, Any]:
        return {"updates": self.updates, "module": self.module.state_dict()}

    def load_state_dict(self, state: dict[str, Any]) -> None:
        self.updates = int(state["updates"])
        self.module.load_state_dict(state["module"])  # copies in place: the cached tensor lists stay valid
