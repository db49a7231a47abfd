"""Learning-rate schedule: per-iteration warm-up, then a per-epoch linear or cosine decay.

The schedule is a pure function of (iteration, epoch), so resuming needs no state beyond the
epoch. Warm-up lasts ``round(warmup_epochs * iterations_per_epoch)`` iterations; during it the
bias group's lr falls from ``warmup_bias_lr`` (SGD only; AdamW starts biases at 0, a high bias
lr destabilises Adam) and the other groups' lr rises from 0, all towards ``initial_lr * f(epoch)``;
momentum (SGD momentum or AdamW beta1) rises from ``warmup_momentum`` to ``momentum``.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import torch


@dataclass(frozen=True, kw_only=True)
class LRSchedule:
    epochs: int
    lrf: float
    cos: bool
    warmup_iters: int
    warmup_bias_lr: float
    warmup_momentum: float
    momentum: float

    def factor(self, epoch: int) -> float:
        """Multiplier of ``initial_lr`` for a (0-based) epoch: 1 at epoch 0 -> lrf at ``epochs``."""
        x = min(epoch, self.epochs) / self.epochs
        if self.cos:
            return ((1 - math.cos(x * math.pi)) / 2) * (self.lrf - 1) + 1
        return (1 - x) * (1.0 - self.lrf) + self.lrf

    def apply(self, optimizer: torch.optim.Optimizer, *, iteration: int, epoch: int) -> None:
        """Set every group's lr (and momentum during warm-up) for this iteration."""
        f = self.factor(epoch)
        warm = iteration < self.warmup_iters
        t = iteration / self.warmup_iters if warm else 1.0
        adam = isinstance(optimizer, torch.optim.AdamW)
        for g in optimizer.param_groups:
            target = g["initial_lr"] * f
            if warm:
                start = self.warmup_bias_lr if (g.get("is_bias") and not adam) else 0.0
                g["lr"] = start + (target - start) * t
                mom = self.warmup_momentum + (self.momentum - self.warmup_momentum) * t
                if "betas" in g:
                    g["betas"] = (mom, g["betas"][1])
                elif "momentum" in g:
                    g["momentum"] = mom
            else:
                g["lr"] = target
