"""Optimiser construction with three parameter groups.

Groups: 0 = conv/linear weights (weight decay), 1 = normalisation weights and the parameters
a module exempts (``NO_WEIGHT_DECAY``: position embeddings, relative-position tables; no decay),
2 = biases (no decay; a warm-up of their own). ``optimizer="auto"`` picks SGD (nesterov) for
long runs (more than 10,000 optimiser steps) and AdamW with a class-count-scaled learning rate,
``0.002 * 5 / (4 + nc)``, for short ones, where SGD from scratch converges too slowly.
"""

from __future__ import annotations

import logging
from dataclasses import dataclass
from typing import Any

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
    """(decayed weights, undecayed weights, biases) of the trainable parameters.

    Undecayed: normalisation weights, other 1-D parameters (scales such as layer-scale gammas),
    and the parameters a module names in its ``NO_WEIGHT_DECAY`` class attribute: the position
    embeddings and class token of a vision transformer and the relative-position bias tables of
    window attention, which the ViT, DeiT and Swin recipes train without weight decay.

    Example:
        >>> from libreyolo.layers.window_attention import RelativePositionBias
        >>> net = nn.Sequential(nn.Linear(4, 4), nn.LayerNorm(4), RelativePositionBias(2, 1))
        >>> [len(g) for g in param_groups(net)]  # linear weight; norm weight, bias table; two biases
        [1, 2, 2]
    """
    decay, norm, bias = [], [], []
    norm_types = (nn.modules.batchnorm._NormBase, nn.GroupNorm, nn.LayerNorm)
    for module in net.modules():
        exempt = getattr(module, "NO_WEIGHT_DECAY", ())
        for pname, p in module.named_parameters(recurse=False):
            if not p.requires_grad:
                continue
            if pname == "bias":
                bias.append(p)
            elif isinstance(module, norm_types) or p.ndim <= 1 or pname in exempt:
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


PROBE = "probe"  # freeze="probe": a linear probe, everything but the classifier head frozen


def probe_head(net: nn.Module) -> str:
    """The classifier head a linear probe trains: the last module (in ``named_modules`` order)
    that holds parameters of its own (a classifier's final ``Linear``, or a zero-shot head).

    Example:
        >>> probe_head(nn.Sequential(nn.Conv2d(3, 8, 3), nn.Flatten(), nn.Linear(8, 2)))
        '2'
    """
    last = ""
    for name, m in net.named_modules():
        if name and any(True for _ in m.parameters(recurse=False)):
            last = name
    if not last:
        raise ConfigError("freeze='probe': the network has no module with parameters to train")
    return last


def hold_frozen_eval(net: nn.Module, head: str) -> None:
    """After ``net.train()`` in a linear probe: every module that is neither ``head`` (or below
    it) nor one of its parents runs in eval mode, so the frozen features are those of
    prediction (no stochastic depth or dropout, BatchNorm statistics not updated)."""
    for name, m in net.named_modules():
        if name and not (name == head or name.startswith(head + ".") or head.startswith(name + ".")):
            m.eval()


def freeze_modules(net: nn.Module, spec: int | str) -> tuple[int, int]:
    """Freeze (``requires_grad = False``) the parameters ``spec`` names; (frozen, total) parameter counts.

    ``spec``: an int N = the first N top-level modules of ``net`` (in ``named_children`` order; 0
    freezes nothing), a comma-separated list of module-name prefixes (``"stem1,p2"``,
    ``"backbone.layer1"``), each matching a module and everything below it, or ``"probe"`` (a
    linear probe: every parameter outside :func:`probe_head`). Frozen parameters
    are left out of the optimizer (:func:`param_groups` skips them). Other parameters are left
    as they are (a family's fixed tensors, e.g. a DFL projection, stay fixed).

    Example:
        >>> net = nn.Sequential(nn.Conv2d(3, 8, 3), nn.BatchNorm2d(8), nn.Conv2d(8, 8, 1))
        >>> freeze_modules(net, 2)  # conv (216 + 8) and batch norm (8 + 8) frozen
        (240, 312)
        >>> net = nn.Sequential(nn.Conv2d(3, 8, 3), nn.Flatten(), nn.Linear(8, 2))
        >>> freeze_modules(net, "probe")  # all but the Linear's 8 * 2 + 2
        (224, 242)
    """
    children = [name for name, _ in net.named_children()]
    if spec == PROBE:
        head = probe_head(net)
        frozen = total = 0
        for name, param in net.named_parameters():
            total += param.numel()
            if not name.startswith(head + "."):
                param.requires_grad_(False)
                frozen += param.numel()
        return frozen, total
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

    Two paths with the same numbers:

    * the **lean path**, for a ``fused=True`` AdamW or SGD over float32 parameters (what
      :func:`build_optimizer` makes on CUDA): the parameter and optimiser-state lists are made
      once, and each step is the handful of multi-tensor kernels torch's own fused step runs
      (unscale + inf check, the gradient norm, the clip, the fused update, the scale update),
      without torch.optim's per-parameter Python (grouping by device and dtype, state lookups,
      one ``.to()`` per gradient norm): on a 675-tensor detector that Python is most of a 10 ms
      step. It is used from the second step on (the first one creates the optimiser state) and
      only while every parameter has a gradient; the optimiser's and the scaler's tensors are the
      ones updated, so checkpoints, ``state_dict()`` and ``get_scale()`` see the same state (AdamW's
      per-parameter step counters become views of one tensor per group, their values kept, so
      counting a step is one add instead of one per parameter);
    * the **torch path** otherwise: ``scaler.unscale_``, ``clip_grad_norm_`` over the parameter
      list, ``scaler.step``, ``scaler.update``.

    The parameter list is those with ``requires_grad`` in ``net.parameters()`` order, the order
    ``clip_grad_norm_(net.parameters())`` sees, so the norm is summed in the same order.
    ``tests/unit/training/test_optimizer_step.py`` proves the lean path bit for bit equal to the
    torch path (AdamW and SGD, clipping active, a skipped non-finite step).

    Example:
        >>> net = nn.Linear(4, 2)
        >>> opt = torch.optim.SGD(net.parameters(), lr=0.1)
        >>> step = OptimizerStep(net, opt, torch.amp.GradScaler("cpu", enabled=False), clip_grad=10.0)
        >>> net(torch.ones(1, 4)).sum().backward()
        >>> step()
        >>> len(step.params), step.lean_steps  # a foreach SGD: always the torch path
        (2, 0)
    """

    def __init__(self, net: nn.Module, optimizer: torch.optim.Optimizer, scaler: torch.amp.GradScaler, *,
                 clip_grad: float) -> None:
        self.optimizer, self.scaler, self.clip_grad = optimizer, scaler, float(clip_grad)
        self.params = [p for p in net.parameters() if p.requires_grad]
        self.kind = _lean_kind(optimizer)
        self.lean_steps = 0
        self._groups: list[tuple[dict[str, Any], list[nn.Parameter], list[list[torch.Tensor]]]] | None = None
        self._state_ref: object = None

    def __call__(self) -> None:
        if self.kind is not None and self._lean_ready():
            self._lean_step()
            self.lean_steps += 1
            return
        self.scaler.unscale_(self.optimizer)
        if self.clip_grad > 0:
            torch.nn.utils.clip_grad_norm_(self.params, max_norm=self.clip_grad)
        self.scaler.step(self.optimizer)
        self.scaler.update()

    def _lean_ready(self) -> bool:
        """Every parameter has a gradient and the optimiser state exists (lists made on first use,
        again after ``load_state_dict`` replaced the state)."""
        for p in self.params:
            if p.grad is None:
                return False
        if self.scaler.is_enabled() and getattr(self.scaler, "_scale", None) is None:
            return False  # nothing was scaled yet
        opt = self.optimizer
        if self._groups is not None and self._state_ref is opt.state:
            return True
        keys = ("exp_avg", "exp_avg_sq", "step") if self.kind == "adamw" else ("momentum_buffer",)
        groups = []
        for g in opt.param_groups:
            ps = list(g["params"])
            if self.kind == "sgd" and g["momentum"] == 0:
                groups.append((g, ps, []))
                continue
            states = [opt.state.get(p) for p in ps]
            if any(st is None or any(st.get(k) is None for k in keys) for st in states):
                return False  # the first step (torch's) creates the state
            lists = [[st[k] for st in states] for k in keys]  # type: ignore[index]
            if self.kind == "adamw":  # the step counters become views of one tensor: one add per step
                flat = torch.stack(lists[2])
                for i, st in enumerate(states):
                    st["step"] = flat[i]  # type: ignore[index]
                lists[2] = [st["step"] for st in states]  # type: ignore[index]
                lists.append([flat])
            groups.append((g, ps, lists))
        if sum(len(ps) for _, ps, _ in groups) != len(self.params):
            return False  # parameters outside the optimiser (or frozen inside it): torch's path
        self._groups, self._state_ref = groups, opt.state
        return True

    @torch.no_grad()
    def _lean_step(self) -> None:
        """torch's fused step, op for op (``GradScaler.unscale_/update``, ``clip_grad_norm_``,
        ``_fused_adam`` / ``_fused_sgd`` of the installed torch), on the cached lists."""
        sc, grads = self.scaler, [p.grad for p in self.params]
        found_inf = None
        if sc.is_enabled():
            inv_scale = sc._scale.double().reciprocal().float()  # type: ignore[union-attr]
            found_inf = torch.full((), 0.0, dtype=torch.float32, device=sc._scale.device)  # type: ignore[union-attr]
            torch._amp_foreach_non_finite_check_and_unscale_(grads, found_inf, inv_scale)
        if self.clip_grad > 0:
            norms = torch._foreach_norm(grads, 2.0)
            total_norm = torch.linalg.vector_norm(torch.stack(norms), 2.0)
            clip_coef = self.clip_grad / (total_norm + 1e-6)
            torch._foreach_mul_(grads, torch.clamp(clip_coef, max=1.0))
        assert self._groups is not None
        for g, ps, state in self._groups:
            gg = [p.grad for p in ps]
            if self.kind == "adamw":
                exp_avgs, exp_avg_sqs, steps, flat = state
                torch._foreach_add_(flat, 1)
                torch._fused_adamw_(ps, gg, exp_avgs, exp_avg_sqs, [], steps, amsgrad=False, lr=g["lr"],
                                    beta1=float(g["betas"][0]), beta2=float(g["betas"][1]),
                                    weight_decay=g["weight_decay"], eps=g["eps"], maximize=False,
                                    grad_scale=None, found_inf=found_inf)
                if found_inf is not None:
                    torch._foreach_sub_(flat, [found_inf])
            else:
                torch._fused_sgd_(ps, gg, state[0] if state else [], weight_decay=g["weight_decay"],
                                  momentum=g["momentum"], lr=g["lr"], dampening=g["dampening"],
                                  nesterov=g["nesterov"], maximize=False, is_first_step=False,
                                  grad_scale=None, found_inf=found_inf)
        if found_inf is not None:
            torch._amp_update_scale_(sc._scale, sc._growth_tracker, found_inf, sc._growth_factor,  # type: ignore[arg-type]
                                     sc._backoff_factor, sc._growth_interval)


def _lean_kind(optimizer: torch.optim.Optimizer) -> str | None:
    """"adamw" / "sgd" when :class:`OptimizerStep`'s lean path reproduces ``optimizer.step()``:
    exactly torch's AdamW or SGD, ``fused=True``, no amsgrad / maximize / differentiable / tensor
    hyper-parameters, float32 parameters; else None."""
    t = type(optimizer)
    kind = "adamw" if t is torch.optim.AdamW else "sgd" if t is torch.optim.SGD else None
    if kind is None or not all(hasattr(torch, op) for op in (
            "_fused_adamw_", "_fused_sgd_", "_foreach_norm", "_amp_foreach_non_finite_check_and_unscale_",
            "_amp_update_scale_")):
        return None
    for g in optimizer.param_groups:
        if not g.get("fused") or g.get("maximize") or g.get("differentiable") or g.get("amsgrad"):
            return None
        if kind == "adamw" and g.get("decoupled_weight_decay") is False:
            return None
        hyper = [g["lr"], g["weight_decay"], *(g["betas"] if kind == "adamw" else (g["momentum"],))]
        if any(isinstance(v, torch.Tensor) for v in hyper):
            return None
        if any(p.dtype != torch.float32 for p in g["params"]):
            return None
    return kind
