"""Shared by the fidelity tests: non-trivial BatchNorm statistics and a relative comparison."""

from __future__ import annotations

import torch
from torch import nn


@torch.no_grad()
def randomize_norms(module: nn.Module, seed: int = 1) -> None:
    """Give every BatchNorm random affine parameters and running statistics (a fresh init has
    mean 0 / var 1 / gamma 1 / beta 0, which would hide a swapped or missing statistic)."""
    g = torch.Generator().manual_seed(seed)
    for m in module.modules():
        if isinstance(m, nn.modules.batchnorm._BatchNorm):
            n = m.num_features
            m.running_mean.copy_(torch.randn(n, generator=g) * 0.1)
            m.running_var.copy_(torch.rand(n, generator=g) * 0.5 + 0.75)
            if m.affine:
                m.weight.copy_(torch.rand(n, generator=g) * 0.25 + 0.5)  # keeps deep nets well conditioned
                m.bias.copy_(torch.randn(n, generator=g) * 0.1)


def assert_rel_close(ours: torch.Tensor, ref: torch.Tensor, *, rtol: float = 1e-5, what: str = "") -> None:
    """``|ours - ref| <= rtol * max|ref|`` elementwise (fp32 outputs of the same math)."""
    assert ours.shape == ref.shape, f"{what}: shape {tuple(ours.shape)} vs {tuple(ref.shape)}"
    scale = ref.abs().max().clamp_min(1e-12)
    err = (ours.double() - ref.double()).abs().max() / scale
    assert err <= rtol, f"{what}: max relative difference {err:.3g} > {rtol:g}"
