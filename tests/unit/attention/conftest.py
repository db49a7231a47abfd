"""Fixtures for the attention kernel tests: a clean kernel-registry state per test."""

from __future__ import annotations

import os

import pytest
import torch

# Triton decides interpreter mode when it is imported (its standard library is wrapped then), so
# the CPU interpreter must be requested before anything imports triton. Only on machines
# without CUDA: a GPU run compiles the kernels for real.
if not torch.cuda.is_available():
    os.environ.setdefault("TRITON_INTERPRET", "1")

from libreyolo.kernels import registry
from libreyolo.layers.msda import level_layout


@pytest.fixture(autouse=True)
def _clean_registry(monkeypatch: pytest.MonkeyPatch):
    monkeypatch.delenv("LIBREYOLO_KERNELS", raising=False)
    monkeypatch.delenv("LIBREYOLO_QUANT_KERNELS", raising=False)
    monkeypatch.delenv("LIBREYOLO_HUB_KERNELS", raising=False)
    registry.clear_cache()
    yield
    registry.clear_cache()


def _make_inputs(*, dtype: torch.dtype = torch.float32, seed: int = 0, grad: bool = False):
    """Tiny MSDA inputs: B=2, 2 levels (3x4, 2x2), H=2, C=3, Q=5, P=3."""
    g = torch.Generator().manual_seed(seed)
    shapes = [(3, 4), (2, 2)]
    b, h, c, q, lv, p = 2, 2, 3, 5, 2, 3
    s = sum(hh * ww for hh, ww in shapes)
    value = torch.randn(b, s, h, c, generator=g).to(dtype)
    loc = (torch.rand(b, q, h, lv, p, 2, generator=g) * 1.3 - 0.15).to(dtype)
    weights = torch.rand(b, q, h, lv, p, generator=g).to(dtype)
    if grad:
        for t in (value, loc, weights):
            t.requires_grad_(True)
    return shapes, level_layout(shapes), value, loc, weights


@pytest.fixture
def make_inputs():
    """Factory of tiny MSDA inputs (see ``_make_inputs``)."""
    return _make_inputs
