"""The run's optimisation plan: accumulation, the optimiser and the LR / momentum schedule.

One pure set-up step of :meth:`libreyolo.training.trainer.Trainer.setup`: from the config, the
batch layout and (on resume) the saved optimiser state it decides how many micro-batches make one
optimiser step, which parameters it trains (``freeze``), which optimiser (``optimizer="auto"``: by
the number of steps), its weight decay and the warm-up. It warns once when the run makes very few optimiser steps.
"""

from __future__ import annotations

import dataclasses
import logging
from typing import Any

import torch
from torch import nn

from .config import TrainConfig
from .optim import AUTO_SGD_MIN_STEPS, build_optimizer, choose_optimizer, freeze_modules
from .scheduler import LRSchedule, count_optimizer_steps, warmup_iterations

logger = logging.getLogger(__name__)
# fewer optimizer steps than this in a run: one warning with the numbers
FEW_STEPS = 10


def _s(n: int) -> str:
    """Plural suffix: ``f"{n} epoch{_s(n)}"``."""
    return "" if n == 1 else "s"


@dataclasses.dataclass(frozen=True, kw_only=True)
class StepPlan:
    """accumulate: micro-batches per optimiser step after warm-up; total_steps: optimiser steps of
    the whole run (from epoch 0)."""

    accumulate: int
    optimizer: torch.optim.Optimizer
    schedule: LRSchedule
    total_steps: int


def plan_steps(cfg: TrainConfig, *, net: nn.Module, nc: int, batch: int, world_size: int, nb: int,
               explicit: set[str], device: torch.device, train_state: dict[str, Any] | None,
               warn: bool) -> StepPlan:
    """The optimisation plan of a run of ``nb`` batches per epoch of ``batch`` images per process.

    ``train_state``: the resumed checkpoint's training state (None for a new run); ``warn``: log
    the few-steps warning (rank 0).
    """
    total_batch = batch * world_size
    accumulate = max(round(cfg.nbs / total_batch), 1)
    wd = cfg.weight_decay * total_batch * accumulate / cfg.nbs
    plan = LRSchedule(epochs=cfg.epochs, lrf=cfg.lrf, cos=cfg.cos_lr,
                      warmup_iters=warmup_iterations(warmup_epochs=cfg.warmup_epochs, iters_per_epoch=nb,
                                                     epochs=cfg.epochs),
                      warmup_bias_lr=cfg.warmup_bias_lr, warmup_momentum=cfg.warmup_momentum,
                      momentum=cfg.momentum, accumulate=accumulate,
                      nominal_accumulate=max(cfg.nbs / total_batch, 1.0))
    steps = count_optimizer_steps(plan, iters_per_epoch=nb, epochs=cfg.epochs)
    choice_steps = steps
    if train_state is not None and cfg.optimizer == "auto":  # epochs=N on resume must not switch SGD <-> AdamW
        saved_groups = train_state["optimizer"]["param_groups"]
        choice_steps = 0 if saved_groups and "betas" in saved_groups[0] else AUTO_SGD_MIN_STEPS + 1
    choice = choose_optimizer(name=cfg.optimizer, lr0=cfg.lr0, momentum=cfg.momentum, nc=nc,
                              total_steps=choice_steps)
    if cfg.freeze:  # before the optimizer is built: frozen parameters are left out of it
        frozen, total = freeze_modules(net, cfg.freeze)
        if warn:
            logger.info("freeze=%s: %s of %s parameters frozen (left out of the optimizer)", cfg.freeze,
                        f"{frozen:,}", f"{total:,}")
    optimizer = build_optimizer(net, choice, weight_decay=wd, device=device)
    # A high bias lr destabilises Adam (measured: a tiny shapes run diverges from warmup_bias_lr=0.1):
    # under AdamW the bias group warms up from 0 like the others unless warmup_bias_lr is given.
    bias_lr = cfg.warmup_bias_lr if choice.name == "SGD" or "warmup_bias_lr" in explicit else 0.0
    schedule = dataclasses.replace(plan, momentum=choice.momentum, warmup_bias_lr=bias_lr)
    left = count_optimizer_steps(schedule, iters_per_epoch=nb, epochs=cfg.epochs,
                                 start_epoch=int(train_state["epoch"]) + 1 if train_state is not None else 0)
    if left < FEW_STEPS and warn:
        logger.warning("this run makes only %d optimizer step%s: %d epoch%s x %d batch%s of %d, accumulating up "
                       "to %d batch%s per step (nbs %d); every epoch ends with a step. For more steps use more "
                       "epochs or data, or a smaller nbs", left, _s(left), cfg.epochs, _s(cfg.epochs), nb,
                       "es" if nb != 1 else "", total_batch, accumulate, "es" if accumulate != 1 else "",
                       cfg.nbs)
    return StepPlan(accumulate=accumulate, optimizer=optimizer, schedule=schedule, total_steps=steps)
