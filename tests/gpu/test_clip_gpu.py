"""CLIP and SigLIP 2 towers on a real GPU: CUDA-graph replay equals eager bit for bit with
``fused_attn`` off (their default), for the logits and for the image embeddings, fp32 and fp16;
with the flag on, SDPA agrees with the explicit equation to rounding (SPEC K-9: whether that is
bitwise is what the parity matrix records, not asserted here)."""

from __future__ import annotations

import pytest
import torch

from libreyolo.graphs.parity import build_probe_model, check_parity
from libreyolo.kernels.attention import set_fused_attention
from libreyolo.registry import families

pytestmark = pytest.mark.cuda
NAMES = ["clip", "siglip2"]
BLOCKS = {"clip": 12, "siglip2": 13}  # attention layers with the flag (SigLIP: + the pooling head)


def _model(name: str):
    cls = families()[name]
    model = build_probe_model(cls, size="b16", task="classify", device="cuda", seed=0)
    assert set_fused_attention(model.net, enabled=False) == BLOCKS[name]
    return model


@pytest.mark.parametrize("name", NAMES)
@pytest.mark.parametrize("amp", [None, torch.float16], ids=["fp32", "fp16"])
def test_logits_graph_replay_is_bitwise(name: str, amp: torch.dtype | None) -> None:
    row = check_parity(_model(name), shape=(2, 3, 224, 224), amp_dtype=amp)
    assert row["result"] == "pass", row


@pytest.mark.parametrize("name", NAMES)
@pytest.mark.parametrize("amp", [None, torch.float16], ids=["fp32", "fp16"])
def test_embedding_graph_replay_is_bitwise(name: str, amp: torch.dtype | None) -> None:
    net = _model(name).net
    x = torch.rand(2, 3, 224, 224, device="cuda", generator=torch.Generator(device="cuda").manual_seed(1))

    def run() -> torch.Tensor:
        with torch.no_grad(), torch.autocast("cuda", dtype=amp or torch.float32, enabled=amp is not None):
            return net.embed(x)

    eager = run().clone()
    side = torch.cuda.Stream()
    side.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(side):
        run()  # warm-up outside the capture
    torch.cuda.current_stream().wait_stream(side)
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.graph(graph):
        out = run()
    graph.replay()
    torch.cuda.synchronize()
    assert torch.equal(out, eager)


@pytest.mark.parametrize("name", NAMES)
@pytest.mark.parametrize(("amp", "tol"), [(None, 1e-4), (torch.float16, 2e-2)], ids=["fp32", "fp16"])
def test_sdpa_agrees_with_the_equation(name: str, amp, tol: float) -> None:
    model = _model(name)
    x = torch.rand(4, 3, 224, 224, device="cuda", generator=torch.Generator(device="cuda").manual_seed(2))
    off = model.eager_forward(x, amp_dtype=amp).float()
    assert set_fused_attention(model.net, enabled=True) == BLOCKS[name]
    on = model.eager_forward(x, amp_dtype=amp).float()
    err = float((on - off).abs().max() / off.abs().max())
    assert err <= tol, err
