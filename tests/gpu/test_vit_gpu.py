"""ViT / DeiT / DINOv2 on a real GPU: the fused-attention policy (SPEC K-9) with the flag on (the
default of ViT and DeiT; DINOv2's default is off, so these tests turn it on).

Eager runs SDPA, a captured graph records the explicit equation (never SDPA), so the replay equals
eager with the flag off bit for bit, and SDPA agrees with the equation to rounding. Whether eager
with the flag on equals the replay bit for bit is what the parity matrix records
(``benchmarks/parity_predict.py``), not asserted here.
"""

from __future__ import annotations

import pytest
import torch
import torch.nn.functional as F

from libreyolo.graphs.runner import PredictGraphs
from libreyolo.kernels.attention import set_fused_attention
from libreyolo.registry import families

pytestmark = pytest.mark.cuda
CASES = [("deit", "t"), ("vit", "s16"), ("dinov2", "s14")]


def _model(name: str, size: str):
    torch.manual_seed(0)
    model = families()[name](size=size, nc=10).to("cuda")
    assert set_fused_attention(model.net, enabled=True) == 12
    return model


@pytest.mark.parametrize(("name", "size"), CASES)
@pytest.mark.parametrize("amp", [None, torch.float16], ids=["fp32", "fp16"])
def test_capture_records_the_equation_with_fused_attention_on(name: str, size: str, amp, monkeypatch) -> None:
    model = _model(name, size)
    calls: list[bool] = []
    sdpa = F.scaled_dot_product_attention

    def counting(*a, **k):
        calls.append(torch.cuda.is_current_stream_capturing())
        return sdpa(*a, **k)

    monkeypatch.setattr(F, "scaled_dot_product_attention", counting)
    x = torch.rand(2, 3, 224, 224, device="cuda", generator=torch.Generator(device="cuda").manual_seed(1))
    model.eager_forward(x, amp_dtype=amp)
    assert calls == [False] * 12, "eager with the flag on runs SDPA in every block"
    runner = PredictGraphs(model, force=True, capacity=1)
    replay = runner.run(x, policy=True, amp_dtype=amp).clone()
    replay = runner.run(x, policy=True, amp_dtype=amp).clone()
    assert runner.info()["graphs"], "nothing was captured"
    assert not any(calls), "SDPA ran while a CUDA graph was being captured"
    runner.release()
    assert set_fused_attention(model.net, enabled=False) == 12
    assert torch.equal(replay, model.eager_forward(x, amp_dtype=amp))


@pytest.mark.parametrize(("name", "size"), CASES)
@pytest.mark.parametrize(("amp", "tol"), [(None, 1e-4), (torch.float16, 2e-2)], ids=["fp32", "fp16"])
def test_sdpa_agrees_with_the_equation(name: str, size: str, amp, tol: float) -> None:
    model = _model(name, size)
    x = torch.rand(4, 3, 224, 224, device="cuda", generator=torch.Generator(device="cuda").manual_seed(2))
    on = model.eager_forward(x, amp_dtype=amp).float()
    set_fused_attention(model.net, enabled=False)
    off = model.eager_forward(x, amp_dtype=amp).float()
    err = float((on - off).abs().max() / off.abs().max())
    assert err <= tol, err
    assert torch.equal(on.argmax(1), off.argmax(1))
