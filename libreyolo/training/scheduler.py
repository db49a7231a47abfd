"""Learning-rate, momentum and gradient-accumulation schedule: a pure function of the iteration.

Warm-up lasts :func:`warmup_iterations` iterations: ``max(warmup_epochs * iterations_per_epoch,
MIN_WARMUP_ITERS)``, but never more than half of the run's iterations (so a tiny run still
finishes its warm-up and trains at full rate for the other half); ``warmup_epochs=0`` turns it
off. During warm-up:

* the bias group's lr falls linearly from ``warmup_bias_lr`` and every other group's lr rises
  linearly from 0, all towards ``initial_lr * factor(epoch)`` (for SGD and AdamW alike; the DETR
  families default to ``warmup_bias_lr=0``, as their reference recipe);
* SGD momentum rises from ``warmup_momentum`` to ``momentum`` (AdamW's betas are left alone);
* gradient accumulation ramps from 1 micro-batch per optimizer step to the nominal
  ``nbs / total_batch`` (:meth:`LRSchedule.accumulate_at`), so the first steps are frequent
  small ones and a short run or a small dataset still makes many optimizer steps.

After warm-up the lr follows a per-epoch linear (or cosine) decay from 1 to ``lrf`` times
``initial_lr``, and accumulation stays at ``accumulate = max(round(nbs / total_batch), 1)``.

The trainer adds one rule of its own: every epoch ends with an optimizer step, a partly filled
accumulation window included, so a window never spans two epochs (see
:func:`count_optimizer_steps`, which counts a run's steps under that rule). Nothing here holds
state: resuming needs only the iteration number.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import torch

# the shortest warm-up in iterations (unless the run is shorter than twice this)
MIN_WARMUP_ITERS = 100


def warmup_iterations(*, warmup_epochs: float, iters_per_epoch: int, epochs: int,
                      min_iters: int = MIN_WARMUP_ITERS) -> int:
    """Warm-up length in iterations (micro-batches): see the module docstring.

    Example:
        >>> warmup_iterations(warmup_epochs=3, iters_per_epoch=20, epochs=15)  # 60 -> at least 100
        100
        >>> warmup_iterations(warmup_epochs=3, iters_per_epoch=4, epochs=3)    # capped at half the run
        6
    """
    if warmup_epochs <= 0 or iters_per_epoch <= 0 or epochs <= 0:
        return 0
    n = max(round(warmup_epochs * iters_per_epoch), min_iters)
    return max(min(n, (iters_per_epoch * epochs) // 2), 1)


@dataclass(frozen=True, kw_only=True)
class LRSchedule:
    """Per-iteration lr / momentum / accumulation (module docstring).

    ``nominal_accumulate`` is ``nbs / total_batch`` (a float; accumulation ramps towards it during
    warm-up); ``accumulate`` is the whole number used after warm-up.
    """

    epochs: int
    lrf: float
    cos: bool
    warmup_iters: int
    warmup_bias_lr: float
    warmup_momentum: float
    momentum: float
    accumulate: int = 1
    nominal_accumulate: float = 1.0

    def accumulate_at(self, iteration: int) -> int:
        """Micro-batches per optimizer step at ``iteration`` (0-based, counted over the whole run).

        Example:
            >>> s = LRSchedule(epochs=15, lrf=0.01, cos=False, warmup_iters=100, warmup_bias_lr=0.1,
            ...                warmup_momentum=0.8, momentum=0.937, accumulate=4, nominal_accumulate=4.0)
            >>> [s.accumulate_at(i) for i in (0, 16, 50, 84, 99, 100)]
            [1, 1, 2, 4, 4, 4]
        """
        if iteration >= self.warmup_iters:
            return self.accumulate
        t = iteration / self.warmup_iters
        return max(1, round(1.0 + (self.nominal_accumulate - 1.0) * t))

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
        for g in optimizer.param_groups:
            target = g["initial_lr"] * f
            if warm:
                start = self.warmup_bias_lr if g.get("is_bias") else 0.0
                g["lr"] = start + (target - start) * t
                if "momentum" in g:  # SGD; AdamW's betas keep their values
                    g["momentum"] = self.warmup_momentum + (self.momentum - self.warmup_momentum) * t
            else:
                g["lr"] = target
                if "momentum" in g:
                    g["momentum"] = self.momentum


def count_optimizer_steps(schedule: LRSchedule, *, iters_per_epoch: int, epochs: int, start_epoch: int = 0) -> int:
    """Optimizer steps the trainer makes from ``start_epoch`` to ``epochs``.

    A step happens when ``accumulate_at(i)`` micro-batches have run since the previous step, and at
    the last micro-batch of every epoch (a window never spans epochs). Epochs wholly after warm-up
    are counted in closed form, so this stays cheap for long runs.

    Example:
        >>> s = LRSchedule(epochs=3, lrf=0.01, cos=False, warmup_iters=0, warmup_bias_lr=0.1,
        ...                warmup_momentum=0.8, momentum=0.937, accumulate=32, nominal_accumulate=32.0)
        >>> count_optimizer_steps(s, iters_per_epoch=4, epochs=3)  # 8 images, batch 2, nbs 64
        3
    """
    nb, steps = iters_per_epoch, 0
    if nb <= 0:
        return 0
    for epoch in range(start_epoch, epochs):
        first = epoch * nb
        if first >= schedule.warmup_iters:
            steps += math.ceil(nb / max(schedule.accumulate, 1))
            continue
        last_step = first - 1
        for ni in range(first, first + nb):
            if ni - last_step >= schedule.accumulate_at(ni) or ni == first + nb - 1:
                steps += 1
                last_step = ni
    return steps
