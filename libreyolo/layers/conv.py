"""Convolution building blocks: Conv + BatchNorm + activation, a re-parameterisable two-branch
conv (3x3 + 1x1, RepVGG style without the identity branch), and the helpers that fold
BatchNorm into convolutions and merge branches for inference.

Fusing is done in place and is one-way: a fused module keeps its forward contract (same
outputs within float tolerance, same shapes) but cannot train its BatchNorm any more.
"""

from __future__ import annotations

import contextlib
import logging
import threading
from collections.abc import Iterator

import torch
import torch.nn.functional as F
from torch import Tensor, nn
from torch.nn.modules import module as _module

logger = logging.getLogger(__name__)

BN_EPS = 1e-3
BN_MOMENTUM = 0.03


def autopad(k: int, p: int | None = None, d: int = 1) -> int:
    """'Same' padding for an odd kernel ``k`` with dilation ``d`` (when ``p`` is None)."""
    if p is not None:
        return p
    k_eff = d * (k - 1) + 1
    return k_eff // 2


def make_act(act: bool | nn.Module) -> nn.Module:
    """``True`` -> SiLU (in place: every caller feeds it a freshly computed tensor),
    ``False`` -> identity, a module -> itself."""
    if act is True:
        return nn.SiLU(inplace=True)
    if act is False or act is None:
        return nn.Identity()
    return act


@torch.no_grad()
def fuse_conv_bn(conv: nn.Conv2d, bn: nn.BatchNorm2d) -> nn.Conv2d:
    """A new conv equal to ``bn(conv(x))`` with ``bn`` in eval mode (running statistics).

    conv.weight (Tensor[Co, Ci/g, k, k]); the result has a bias (Tensor[Co]) and lives on the
    same device / dtype as ``conv.weight``.
    """
    w, b = bn_folded_kernel(conv.weight, conv.bias, bn)
    fused = nn.Conv2d(
        conv.in_channels, conv.out_channels, conv.kernel_size, stride=conv.stride,
        padding=conv.padding, dilation=conv.dilation, groups=conv.groups, bias=True,
        padding_mode=conv.padding_mode, device=conv.weight.device, dtype=conv.weight.dtype,
    )
    fused.weight.copy_(w)
    fused.bias.copy_(b)
    fused.requires_grad_(conv.weight.requires_grad)
    fused.train(conv.training)  # a new module starts in training mode; keep the replaced one's
    return fused


@torch.no_grad()
def bn_folded_kernel(
    weight: Tensor, bias: Tensor | None, bn: nn.BatchNorm2d
) -> tuple[Tensor, Tensor]:
    """Kernel and bias of ``bn(conv(x))``.

    weight (Tensor[Co, ...]) -> (Tensor[Co, ...], Tensor[Co]).

    Computed in float64 where the device supports it, then cast back to ``weight.dtype``.
    """
    calc = torch.float32 if weight.device.type == "mps" else torch.float64
    var = bn.running_var.to(calc)
    mean = bn.running_mean.to(calc)
    gamma = bn.weight.to(calc) if bn.weight is not None else torch.ones_like(var)
    beta = bn.bias.to(calc) if bn.bias is not None else torch.zeros_like(var)
    scale = gamma / torch.sqrt(var + bn.eps)  # (Co,)
    b0 = bias.to(calc) if bias is not None else torch.zeros_like(mean)
    w = weight.to(calc) * scale.view(-1, *([1] * (weight.dim() - 1)))
    b = beta + (b0 - mean) * scale
    return w.to(weight.dtype), b.to(weight.dtype)


def _observed(m: nn.Module) -> bool:
    """Whether calling ``m`` as a module does more than its forward (hooks on it or global ones).
    Called twice per fused conv + activation in every eager forward: no import statement here
    (each costs an import-machinery call), the module is bound at import time."""
    return bool(m._forward_hooks or m._forward_pre_hooks or _module._global_forward_hooks
                or _module._global_forward_pre_hooks)


_GRAPH_BIAS_ACT = threading.local()


@contextlib.contextmanager
def graph_bias_act(enabled: bool = True) -> Iterator[None]:
    """While open (on this thread), a fused ``Conv2d`` with bias followed by SiLU runs its bias
    add and SiLU as one kernel (the ``bias_act`` slot, :mod:`libreyolo.kernels.conv_act`) instead
    of ATen's two, on CUDA inputs outside autograd. The prediction graph runner opens it around
    warm-up and capture of a family with ``GRAPH_BIAS_ACT``: the captured replay then has one
    kernel less per such pair, while eager calls (where a Triton launch costs more host time than
    it saves) keep ATen's. The provider computes what ATen computes bit for bit (its GPU tests
    check it), so the replay still equals the eager forward.

    Example:
        >>> with graph_bias_act():
        ...     y = ConvBNAct(3, 4)(torch.zeros(1, 3, 8, 8))  # CPU, unfused: nothing changes
    """
    before = getattr(_GRAPH_BIAS_ACT, "on", False)
    _GRAPH_BIAS_ACT.on = bool(enabled)
    try:
        yield
    finally:
        _GRAPH_BIAS_ACT.on = before


def _bias_silu(conv: nn.Conv2d, x: Tensor) -> Tensor | None:
    """``silu(conv(x))`` through the ``bias_act`` slot, or ``None`` where it does not apply."""
    if not getattr(_GRAPH_BIAS_ACT, "on", False) or conv.bias is None or not x.is_cuda:
        return None
    if torch.is_grad_enabled() and (x.requires_grad or conv.weight.requires_grad):
        return None
    from .. import kernels

    y = F.conv2d(x, conv.weight, None, conv.stride, conv.padding, conv.dilation, conv.groups)
    return kernels.dispatch("bias_act", y, conv.bias)


def _direct_conv_act(conv: nn.Module, act: nn.Module, x: Tensor) -> Tensor | None:
    """``act(conv(x))`` as the two functional calls those modules' forwards make, or ``None``
    when that would not be the same computation (a subclass or replaced module, a padding mode
    other than zeros, an activation other than SiLU / identity, hooks). A conv computes the same
    in training and eval mode, so the mode is not consulted.

    Inference runs a fused network whose conv + activation pairs are the bulk of its module
    calls; each ``nn.Module.__call__`` costs microseconds of host time, which is what an eager
    forward of a small network on a GPU waits for. The kernels, their arguments and so the bits
    are those of ``act(conv(x))``; tracing, export and autocast see the same ``aten::conv2d`` /
    ``aten::silu_``.
    """
    if type(conv) is not nn.Conv2d or conv.padding_mode != "zeros" or _observed(conv):
        return None
    kind = type(act)
    if kind is nn.SiLU:
        if _observed(act):
            return None
        y = _bias_silu(conv, x)
        if y is not None:
            return y
        y = F.conv2d(x, conv.weight, conv.bias, conv.stride, conv.padding, conv.dilation, conv.groups)
        return F.silu(y, inplace=act.inplace)
    if kind is nn.Identity:
        if _observed(act):
            return None
        return F.conv2d(x, conv.weight, conv.bias, conv.stride, conv.padding, conv.dilation, conv.groups)
    return None


class ConvBNAct(nn.Module):
    """Conv2d (no bias) -> BatchNorm2d -> activation (SiLU by default).

    x (Tensor[B, c1, H, W]) -> (Tensor[B, c2, H', W']). After :meth:`fuse` the BatchNorm is
    folded into ``conv`` (which gains a bias) and ``bn`` is ``None``.

    Example:
        >>> m = ConvBNAct(3, 16, k=3, s=2)
        >>> m(torch.zeros(1, 3, 32, 32)).shape
        torch.Size([1, 16, 16, 16])
    """

    def __init__(self, c1: int, c2: int, k: int = 1, s: int = 1, p: int | None = None, *,
                 g: int = 1, d: int = 1, act: bool | nn.Module = True) -> None:
        super().__init__()
        self.conv = nn.Conv2d(c1, c2, k, s, autopad(k, p, d), dilation=d, groups=g, bias=False)
        self.bn: nn.BatchNorm2d | None = nn.BatchNorm2d(c2, eps=BN_EPS, momentum=BN_MOMENTUM)
        self.act = make_act(act)

    def forward(self, x: Tensor) -> Tensor:
        if self.bn is None:  # fused (inference): one functional call where nothing observes the children
            y = _direct_conv_act(self.conv, self.act, x)
            if y is not None:
                return y
        x = self.conv(x)
        if self.bn is not None:
            x = self.bn(x)
        return self.act(x)

    def fuse(self) -> None:
        """Fold ``bn`` into ``conv`` in place (idempotent)."""
        if self.bn is None:
            return
        self.conv = fuse_conv_bn(self.conv, self.bn)
        self.bn = None


class RepConvN(nn.Module):
    """Re-parameterisable conv: ``act(BN(conv3x3(x)) + BN(conv1x1(x)))``, no identity branch.

    Trains as two branches; :meth:`fuse` merges them into a single 3x3 conv with bias (the 1x1
    kernel is zero-padded to 3x3 and added). x (Tensor[B, c1, H, W]) -> (Tensor[B, c2, H/s, W/s]).
    """

    def __init__(self, c1: int, c2: int, *, s: int = 1, g: int = 1,
                 act: bool | nn.Module = True) -> None:
        super().__init__()
        self.conv1: ConvBNAct | None = ConvBNAct(c1, c2, 3, s, 1, g=g, act=False)
        self.conv2: ConvBNAct | None = ConvBNAct(c1, c2, 1, s, 0, g=g, act=False)
        self.conv: nn.Conv2d | None = None  # set by fuse()
        self.act = make_act(act)

    def forward(self, x: Tensor) -> Tensor:
        if self.conv is not None:
            y = _direct_conv_act(self.conv, self.act, x)
            return y if y is not None else self.act(self.conv(x))
        return self.act(self.conv1(x) + self.conv2(x))

    @torch.no_grad()
    def fuse(self) -> None:
        """Merge both branches (and their BatchNorms) into ``self.conv`` in place (idempotent)."""
        if self.conv is not None:
            return
        k3, b3 = _branch_kernel(self.conv1)
        k1, b1 = _branch_kernel(self.conv2)
        k = k3 + F.pad(k1, [1, 1, 1, 1])
        src = self.conv1.conv
        fused = nn.Conv2d(src.in_channels, src.out_channels, 3, stride=src.stride, padding=1,
                          groups=src.groups, bias=True, device=src.weight.device,
                          dtype=src.weight.dtype)
        fused.weight.copy_(k)
        fused.bias.copy_(b3 + b1)
        fused.requires_grad_(src.weight.requires_grad)
        fused.train(src.training)
        self.conv = fused
        self.conv1 = None
        self.conv2 = None


def _branch_kernel(branch: ConvBNAct) -> tuple[Tensor, Tensor]:
    conv = branch.conv
    if branch.bn is None:  # already folded
        bias = conv.bias
        if bias is None:
            bias = conv.weight.new_zeros(conv.out_channels)
        return conv.weight, bias
    return bn_folded_kernel(conv.weight, conv.bias, branch.bn)


def fuse_modules(module: nn.Module) -> int:
    """Fuse every :class:`RepConvN` and :class:`ConvBNAct` inside ``module`` in place.

    Re-parameterisable blocks are merged first (they read their branches' BatchNorms), then
    the remaining Conv+BN pairs are folded. Returns how many modules were fused. Parameters are
    replaced, so anything holding their addresses (optimizers, CUDA graphs) must be rebuilt.
    """
    n = 0
    for m in list(module.modules()):
        if isinstance(m, RepConvN) and m.conv is None:
            m.fuse()
            n += 1
    for m in list(module.modules()):
        if isinstance(m, ConvBNAct) and m.bn is not None:
            m.fuse()
            n += 1
    logger.debug("fused %d modules in %s", n, type(module).__name__)
    return n
