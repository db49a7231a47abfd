"""Swin on a real GPU: the fused-attention policy (SPEC K-9) with the flag off by default.

Off (the default), eager and the captured graph both run the explicit equation, so no call reaches
SDPA. Turned on, eager runs SDPA with the relative-position bias plus the shift mask as its additive
``attn_mask``, a captured graph still records the equation (never SDPA), so the replay equals eager
with the flag off bit for bit, and SDPA agrees with the equation to rounding. Whether eager with the
flag on equals the replay bit for bit is what the parity matrix records
(``benchmarks/parity_predict.py --arch '{"fused_attn": true}'``), not asserted here.
"""

from __future__ import annotations

import pytest
import torch
import torch.nn.functional as F

from libreyolo.graphs.runner import PredictGraphs
from libreyolo.kernels.attention import set_fused_attention
from libreyolo.registry import families

pytestmark = pytest.mark.cuda


def _model():
    torch.manual_seed(0)
    return families()["swin"](size="t", nc=10).to("cuda")


def _counting_sdpa(monkeypatch) -> list[bool]:
    calls: list[bool] = []
    sdpa = F.scaled_dot_product_attention

    def counting(*a, **k):
        calls.append(torch.cuda.is_current_stream_capturing())
        return sdpa(*a, **k)

    monkeypatch.setattr(F, "scaled_dot_product_attention", counting)
    return calls


def _x(batch: int, seed: int) -> torch.Tensor:
    return torch.rand(batch, 3, 224, 224, device="cuda", generator=torch.Generator(device="cuda").manual_seed(seed))


@pytest.mark.parametrize("amp", [None, torch.float16], ids=["fp32", "fp16"])
def test_default_is_the_equation_eager_and_captured(amp, monkeypatch) -> None:
    model = _model()
    calls = _counting_sdpa(monkeypatch)
    x = _x(2, 1)
    eager = model.eager_forward(x, amp_dtype=amp)
    runner = PredictGraphs(model, force=True, capacity=1)
    runner.run(x, policy=True, amp_dtype=amp)
    replay = runner.run(x, policy=True, amp_dtype=amp).clone()
    assert runner.info()["graphs"], "nothing was captured"
    runner.release()
    assert calls == [], "SDPA ran although fused_attn is off by default"
    assert torch.equal(replay, eager)


@pytest.mark.parametrize("amp", [None, torch.float16], ids=["fp32", "fp16"])
def test_capture_records_the_equation_with_fused_attention_on(amp, monkeypatch) -> None:
    model = _model()
    assert set_fused_attention(model.net, enabled=True) == 12
    calls = _counting_sdpa(monkeypatch)
    x = _x(2, 1)
    model.eager_forward(x, amp_dtype=amp)
    assert calls == [False] * 12, "eager with the flag on runs SDPA in every block"
    runner = PredictGraphs(model, force=True, capacity=1)
    runner.run(x, policy=True, amp_dtype=amp)
    replay = runner.run(x, policy=True, amp_dtype=amp).clone()
    assert runner.info()["graphs"], "nothing was captured"
    assert not any(calls), "SDPA ran while a CUDA graph was being captured"
    runner.release()
    set_fused_attention(model.net, enabled=False)
    assert torch.equal(replay, model.eager_forward(x, amp_dtype=amp))


@pytest.mark.parametrize(("amp", "tol"), [(None, 1e-4), (torch.float16, 2e-2)], ids=["fp32", "fp16"])
def test_sdpa_with_the_window_bias_agrees_with_the_equation(amp, tol: float) -> None:
    model = _model()
    x = _x(4, 2)
    off = model.eager_forward(x, amp_dtype=amp).float()
    set_fused_attention(model.net, enabled=True)
    on = model.eager_forward(x, amp_dtype=amp).float()
    err = float((on - off).abs().max() / off.abs().max())
    assert err <= tol, err
    assert torch.equal(on.argmax(1), off.argmax(1))
