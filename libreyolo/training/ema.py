"""Exponential moving average of a network's weights, with a decay ramp.

decay(n) = decay * (1 - exp(-n / tau)) after n updates, so early (noisy) weights fade fast.
Every floating-point tensor of the state dict is averaged, BatchNorm running statistics included.
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

    def current_decay(self) -> float:
        return self.decay * (1 - math.exp(-self.updates / self.tau))

    @torch.no_grad()
    def update(self, net: nn.Module) -> None:
        self.updates += 1
        d = self.current_decay()
        src = net.state_dict()
        ema_f, src_f = [], []
        for k, v in self.module.state_dict().items():
            if v.dtype.is_floating_point:
                ema_f.append(v)
                src_f.append(src[k].detach().to(v.dtype))
            else:
                v.copy_(src[k])
        if ema_f:
            torch._foreach_lerp_(ema_f, src_f, 1.0 - d)  # one fused launch group instead of ~N kernels

    def state_dict(self) -> dict[str, Any]:
        return {"updates": self.updates, "module": self.module.state_dict()}

    def load_state_dict(self, state: dict[str, Any]) -> None:
        self.updates = int(state["updates"])
        self.module.load_state_dict(state["module"])
