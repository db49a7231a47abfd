"""Optimiser construction with three parameter groups.

Groups: 0 = conv/linear weights (weight decay), 1 = normalisation weights (no decay),
2 = biases (no decay; a warm-up of their own). ``optimizer="auto"`` picks SGD (nesterov) for
long runs (more than 10,000 optimiser steps) and AdamW with a class-count-scaled learning rate,
``0.002 * 5 / (4 + nc)``, for short ones, where SGD from scratch converges too slowly.
"""

from __future__ import annotations

import logging
from dataclasses import dataclass

import torch
from torch import nn

from ..errors import ConfigError

logger = logging.getLogger(__name__)

AUTO_SGD_MIN_STEPS = 10_000


@dataclass(frozen=True, kw_only=True)
class OptimizerChoice:
    name: str  # "SGD" | "AdamW"
    lr: float
    momentum: float


def choose_optimizer(*, name: str, lr0: float, momentum: float, nc: int, total_steps: int) -> OptimizerChoice:
    """Resolve ``"auto"`` (see module doc); explicit names keep ``lr0`` and ``momentum``."""
    if name == "auto":
        if total_steps > AUTO_SGD_MIN_STEPS:
            return OptimizerChoice(name="SGD", lr=lr0, momentum=momentum)
        return OptimizerChoice(name="AdamW", lr=round(0.002 * 5 / (4 + nc), 6), momentum=0.9)
    if name not in ("SGD", "AdamW"):
        raise ConfigError(f"optimizer must be 'auto', 'SGD' or 'AdamW', got {name!r}")
    return OptimizerChoice(name=name, lr=lr0, momentum=momentum)


def param_groups(net: nn.Module) -> tuple[list[nn.Parameter], list[nn.Parameter], list[nn.Parameter]]:
    """(decayed weights, normalisation weights, biases) of the trainable parameters."""
    decay, norm, bias = [], [], []
    norm_types = (nn.modules.batchnorm._NormBase, nn.GroupNorm, nn.LayerNorm)
    for module in net.modules():
        for pname, p in module.named_parameters(recurse=False):
            if not p.requires_grad:
                continue
            if pname == "bias":
                bias.append(p)
            elif isinstance(module, norm_types) or p.ndim <= 1:
                norm.append(p)
            else:
                decay.append(p)
    return decay, norm, bias


def step_impl(device: torch.device | None) -> dict[str, bool]:
    """Keyword arguments picking the fastest update torch offers: ``fused=True`` on CUDA (one
    kernel for the whole parameter list), ``foreach=True`` elsewhere (a few multi-tensor kernels
    instead of one Python-level loop per parameter). Numerics are those of the same formula."""
    if device is not None and device.type == "cuda":
        return {"fused": True}
    return {"foreach": True}


def build_optimizer(net: nn.Module, choice: OptimizerChoice, *, weight_decay: float,
                    device: torch.device | None = None) -> torch.optim.Optimizer:
    """Optimizer over :func:`param_groups`; each group stores ``initial_lr`` for the schedule.

    ``device`` selects the implementation (:func:`step_impl`); where torch refuses the fused
    kernel (an old build, a parameter dtype it does not cover) the foreach one is used.
    """
    decay, norm, bias = param_groups(net)
    groups = [{"params": decay, "weight_decay": weight_decay, "is_bias": False},
              {"params": norm, "weight_decay": 0.0, "is_bias": False},
              {"params": bias, "weight_decay": 0.0, "is_bias": True}]
    groups = [g for g in groups if g["params"]]

    def make(impl: dict[str, bool]) -> torch.optim.Optimizer:
        if choice.name == "SGD":
            return torch.optim.SGD(groups, lr=choice.lr, momentum=choice.momentum, nesterov=True, **impl)
        return torch.optim.AdamW(groups, lr=choice.lr, betas=(choice.momentum, 0.999), **impl)

    impl = step_impl(device)
    try:
        opt = make(impl)
    except (RuntimeError, ValueError, TypeError) as e:  # fused unsupported here: the multi-tensor path
        logger.debug("optimizer: %s unavailable (%s); using foreach=True", impl, e)
        impl = {"foreach": True}
        opt = make(impl)
    for g in opt.param_groups:
        g["initial_lr"] = choice.lr
    logger.info("optimizer: %s(lr=%g, momentum=%g, %s) with groups %d weight(decay=%g), %d norm, %d bias",
                choice.name, choice.lr, choice.momentum, next(iter(impl)), len(decay), weight_decay, len(norm),
                len(bias))
    return opt


def freeze_modules(net: nn.Module, spec: int | str) -> tuple[int, int]:
    """Freeze (``requires_grad = False``) the parameters ``spec`` names; (frozen, total) parameter counts.

    ``spec``: an int N = the first N top-level modules of ``net`` (in ``named_children`` order; 0
    freezes nothing), or a comma-separated list of module-name prefixes (``"stem1,p2"``,
    ``"backbone.layer1"``), each matching a module and everything below it. Frozen parameters
    are left out of the optimizer (:func:`param_groups` skips them). Other parameters are left
    as they are (a family's fixed tensors, e.g. a DFL projection, stay fixed).

    Example:
        >>> net = nn.Sequential(nn.Conv2d(3, 8, 3), nn.BatchNorm2d(8), nn.Conv2d(8, 8, 1))
        >>> freeze_modules(net, 2)  # conv (216 + 8) and batch norm (8 + 8) frozen
        (240, 312)
    """
    children = [name for name, _ in net.named_children()]
    if isinstance(spec, int):
        if spec > len(children):
            raise ConfigError(f"freeze={spec} but the network has only {len(children)} top-level modules "
                              f"({', '.join(children)}); pass at most {len(children)} or module-name prefixes")
        prefixes = children[:spec]
    else:
        prefixes = [p.strip() for p in spec.split(",") if p.strip()]
    names = {name for name, _ in net.named_modules() if name}
    for p in prefixes:
        if p not in names:
            raise ConfigError(f"freeze: no module named {p!r} in the network; top-level modules are "
                              f"{', '.join(children)}")
    frozen = total = 0
    for name, param in net.named_parameters():
        total += param.numel()
        if any(name.startswith(p + ".") for p in prefixes):
            param.requires_grad_(False)
            frozen += param.numel()
    return frozen, total


class OptimizerStep:
    """One optimiser step of the loop: unscale (AMP), clip, step, scaler update.

    The trainable parameters are listed once, at construction, so a step walks no module tree
    (``net.parameters()`` on a 1,300-tensor detector costs milliseconds of Python per call). The
    list is the parameters with ``requires_grad`` in ``net.parameters()`` order, the same order
    ``clip_grad_norm_(net.parameters())`` sees after it drops the gradient-less ones, so the
    total norm is summed in the same order and comes out bit for bit the same.

    Example:
        >>> net = nn.Linear(4, 2)
        >>> opt = torch.optim.SGD(net.parameters(), lr=0.1)
        >>> step = OptimizerStep(net, opt, torch.amp.GradScaler("cpu", enabled=False), clip_grad=10.0)
        >>> net(torch.ones(1, 4)).sum().backward()
        >>> step()
        >>> len(step.params)
        2
    """

    def __init__(self, net: nn.Module, optimizer: torch.optim.Optimizer, scaler: torch.amp.GradScaler, *,
                 clip_grad: float) -> None:
        self.optimizer, self.scaler, self.clip_grad = optimizer, scaler, float(clip_grad)
        self.params = [p for p in net.parameters() if p.requires_grad]

    def __call__(self) -> None:
        self.scaler.unscale_(self.optimizer)
        if self.clip_grad > 0:
            torch.nn.utils.clip_grad_norm_(self.params, max_norm=self.clip_grad)
        self.scaler.step(self.optimizer)
        self.scaler.update()
