"""The fused-attention policy (K-9) and the shared Attention layer."""

from __future__ import annotations

import pytest
import torch
import torch.nn.functional as F
from torch import nn

from libreyolo.kernels.attention import sdpa_allowed, set_fused_attention
from libreyolo.layers.attention import Attention


class _Bias(nn.Module):
    def __init__(self, heads: int, n: int) -> None:
        super().__init__()
        self.table = nn.Parameter(torch.randn(heads, n, n))

    def forward(self) -> torch.Tensor:
        return self.table


def _spy(monkeypatch):
    calls = []
    real = F.scaled_dot_product_attention
    monkeypatch.setattr(
        F, "scaled_dot_product_attention", lambda *a, **k: calls.append(1) or real(*a, **k)
    )
    return calls


def test_set_fused_attention_counts_and_round_trips():
    model = nn.Sequential(
        Attention(32, num_heads=4), nn.ReLU(), Attention(32, num_heads=2, fused_attn=True)
    )
    assert set_fused_attention(model) == 2
    assert all(m.fused_attn for m in model if isinstance(m, Attention))
    assert set_fused_attention(model, enabled=False) == 2
    assert not any(m.fused_attn for m in model if isinstance(m, Attention))
    assert set_fused_attention(nn.Linear(2, 2)) == 0


def test_fused_and_equation_agree_and_flag_selects(monkeypatch):
    torch.manual_seed(0)
    m = Attention(32, num_heads=4, rel_pos_bias=_Bias(4, 7)).eval()
    x, mask = (
        torch.randn(2, 7, 32),
        torch.zeros(2, 1, 7, 7).masked_fill(torch.rand(2, 1, 7, 7) > 0.8, -100.0),
    )
    calls = _spy(monkeypatch)
    ref = m(x, attn_bias=mask)
    assert calls == []  # default off: the equation
    set_fused_attention(m)
    fused = m(x, attn_bias=mask)
    assert calls == [1]
    torch.testing.assert_close(fused, ref, atol=1e-5, rtol=1e-5)


@pytest.mark.parametrize(
    "probe", ["is_capturing", "is_onnx_exporting", "is_tracing", "is_exporting"]
)
def test_policy_refuses_sdpa_under_capture_and_export(monkeypatch, probe):
    assert sdpa_allowed()
    monkeypatch.setattr(f"libreyolo.kernels.attention.policy.{probe}", lambda: True)
    assert not sdpa_allowed()
    m = Attention(16, num_heads=2, fused_attn=True).eval()
    calls = _spy(monkeypatch)
    m(torch.randn(1, 5, 16))
    assert calls == []


def test_policy_allows_dynamo_but_not_export(monkeypatch):
    policy = "libreyolo.kernels.attention.policy"
    monkeypatch.setattr(f"{policy}.is_compiling", lambda: True)
    monkeypatch.setattr(f"{policy}.is_capturing", lambda: True)  # e.g. reduce-overhead mode
    assert sdpa_allowed()
    monkeypatch.setattr(f"{policy}.is_exporting", lambda: True)  # torch.export
    assert not sdpa_allowed()


def test_jit_trace_records_the_equation():
    m = Attention(16, num_heads=2, fused_attn=True).eval()
    traced = torch.jit.trace(m, torch.randn(1, 5, 16), check_trace=False)
    assert "scaled_dot_product_attention" not in str(traced.inlined_graph)
    assert "softmax" in str(traced.inlined_graph)


def test_torch_export_records_the_equation():
    m = Attention(16, num_heads=2, fused_attn=True).eval()
    exported = torch.export.export(m, (torch.randn(1, 5, 16),))
    assert "scaled_dot_product" not in str(exported.graph)
    assert "softmax" in str(exported.graph)
