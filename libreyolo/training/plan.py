"""The run's optimisation plan: accumulation, the optimiser and the LR / momentum schedule.

One pure set-up step of :meth:`libreyolo.training.trainer.Trainer.setup`: from the config, the
batch layout and (on resume) the saved optimiser state it decides how many micro-batches make one
optimiser step (:func:`accumulation`: SGD accumulates to ``nbs`` images, AdamW steps every batch),
which optimiser (``optimizer="auto"``: by the number of steps; it takes the parameters that need
gradients, the trainer applies ``freeze`` before, and before DDP wraps the network), its weight
decay and the warm-up. It warns once when the run makes very few optimiser steps.
"""

from __future__ import annotations

import dataclasses
import logging
from typing import Any

import torch
from torch import nn

from .config import TrainConfig
from .optim import AUTO_SGD_MIN_STEPS, build_optimizer, choose_optimizer
from .scheduler import MIN_WARMUP_ITERS, LRSchedule, count_optimizer_steps, warmup_iterations

logger = logging.getLogger(__name__)
# fewer optimizer steps than this in a run: one warning with the numbers
FEW_STEPS = 10
# images per optimizer step by default under SGD, and the weight-decay normaliser (nbs=None)
NOMINAL_BATCH = 64


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


def nominal_batch(cfg: TrainConfig) -> int:
    """Images per optimizer step the weight decay is normalised to: ``nbs``, or 64 by default."""
    return NOMINAL_BATCH if cfg.nbs is None else cfg.nbs


def accumulation(cfg: TrainConfig, *, optimizer: str, total_batch: int) -> int:
    """Micro-batches per optimizer step after warm-up.

    A given ``nbs`` accumulates to it: ``round(nbs / total_batch)`` batches per step. By default
    (``nbs=None``) SGD accumulates to 64 images: its ``lr0`` is tuned for that many images per step
    and its step grows with the gradient (linear scaling). AdamW steps on every batch: its step
    size is set by the lr, not by the gradient's magnitude, so accumulating ``k`` batches divides
    the distance travelled per epoch by about ``k``, while the noise it averages away is small at
    detection batch sizes (thousands of assigned anchors per image). Measured on ``shapes``
    (docs/training.md, "Accumulation"): yolo9-t from scratch, batch 16, 15 epochs, mAP50-95 0.06
    accumulating 4 batches vs 0.81 stepping on every batch. Weight decay is scaled by
    ``total_batch * accumulate / nominal_batch`` either way, so the decay per epoch does not depend
    on the choice.

    Example:
        >>> accumulation(TrainConfig(), optimizer="SGD", total_batch=16)
        4
        >>> accumulation(TrainConfig(), optimizer="AdamW", total_batch=16)
        1
        >>> accumulation(TrainConfig(nbs=64), optimizer="AdamW", total_batch=16)
        4
    """
    if cfg.nbs is None and optimizer != "SGD":
        return 1
    return max(round(nominal_batch(cfg) / total_batch), 1)


def bias_warmup_start(cfg: TrainConfig, *, optimizer: str, warmup_iters: int) -> float:
    """The lr the bias group starts the warm-up at (it falls linearly to the others' lr).

    ``warmup_bias_lr`` (0.1), for SGD and AdamW alike: measured on ``shapes`` (docs/training.md),
    yolo9-t from scratch, 15 epochs, mAP50-95 0.89 / 0.89 (two seeds) against 0.46 / 0.37 when
    AdamW's biases warm up from 0 like the other groups. Under AdamW a warm-up cut short by a tiny
    run (fewer than ``MIN_WARMUP_ITERS`` iterations) starts proportionally lower: on 8 images the
    full 0.1 over a 12-iteration warm-up sent the training loss from 0.21 up to 1.5, while 0.012
    kept it falling. The DETR families set ``warmup_bias_lr=0`` (their reference has no bias warm-up).

    Example:
        >>> bias_warmup_start(TrainConfig(), optimizer="AdamW", warmup_iters=100)
        0.1
        >>> round(bias_warmup_start(TrainConfig(), optimizer="AdamW", warmup_iters=12), 6)
        0.012
    """
    start = cfg.warmup_bias_lr
    if optimizer == "AdamW" and warmup_iters < MIN_WARMUP_ITERS:
        start *= warmup_iters / MIN_WARMUP_ITERS
    return start


def plan_steps(cfg: TrainConfig, *, net: nn.Module, nc: int, batch: int, world_size: int, nb: int,
               explicit: set[str], device: torch.device, train_state: dict[str, Any] | None,
               warn: bool) -> StepPlan:
    """The optimisation plan of a run of ``nb`` batches per epoch of ``batch`` images per process.

    ``train_state``: the resumed checkpoint's training state (None for a new run); ``warn``: log
    the few-steps warning (rank 0).
    """
    total_batch = batch * world_size
    nbs = nominal_batch(cfg)
    nominal = max(round(nbs / total_batch), 1)
    warmup = warmup_iterations(warmup_epochs=cfg.warmup_epochs, iters_per_epoch=nb, epochs=cfg.epochs)

    def schedule_for(acc: int, nominal_acc: float) -> LRSchedule:
        return LRSchedule(epochs=cfg.epochs, lrf=cfg.lrf, cos=cfg.cos_lr, warmup_iters=warmup,
                          warmup_bias_lr=cfg.warmup_bias_lr, warmup_momentum=cfg.warmup_momentum,
                          momentum=cfg.momentum, accumulate=acc, nominal_accumulate=nominal_acc)

    # the optimizer choice ("auto") counts the steps of the nominal-batch schedule
    steps = count_optimizer_steps(schedule_for(nominal, max(nbs / total_batch, 1.0)), iters_per_epoch=nb,
                                  epochs=cfg.epochs)
    choice_steps = steps
    if train_state is not None and cfg.optimizer == "auto":  # epochs=N on resume must not switch SGD <-> AdamW
        saved_groups = train_state["optimizer"]["param_groups"]
        choice_steps = 0 if saved_groups and "betas" in saved_groups[0] else AUTO_SGD_MIN_STEPS + 1
    choice = choose_optimizer(name=cfg.optimizer, lr0=cfg.lr0, momentum=cfg.momentum, nc=nc,
                              total_steps=choice_steps)
    accumulate = accumulation(cfg, optimizer=choice.name, total_batch=total_batch)
    plan = schedule_for(accumulate, max(nbs / total_batch, 1.0) if accumulate > 1 else 1.0)
    if accumulate != nominal:
        steps = count_optimizer_steps(plan, iters_per_epoch=nb, epochs=cfg.epochs)
    # weight decay per epoch stays that of nbs images per step, whatever the batch and accumulation
    wd = cfg.weight_decay * total_batch * accumulate / nbs
    optimizer = build_optimizer(net, choice, weight_decay=wd, device=device)
    schedule = dataclasses.replace(plan, momentum=choice.momentum,
                                   warmup_bias_lr=bias_warmup_start(cfg, optimizer=choice.name, warmup_iters=warmup))
    left = count_optimizer_steps(schedule, iters_per_epoch=nb, epochs=cfg.epochs,
                                 start_epoch=int(train_state["epoch"]) + 1 if train_state is not None else 0)
    if left < FEW_STEPS and warn:
        logger.warning("this run makes only %d optimizer step%s: %d epoch%s x %d batch%s of %d, accumulating up "
                       "to %d batch%s per step (nbs %d); every epoch ends with a step. For more steps use more "
                       "epochs or data, or a smaller nbs", left, _s(left), cfg.epochs, _s(cfg.epochs), nb,
                       "es" if nb != 1 else "", total_batch, accumulate, "es" if accumulate != 1 else "",
                       nbs)
    return StepPlan(accumulate=accumulate, optimizer=optimizer, schedule=schedule, total_steps=steps)
