"""GPU test of the Depth Anything 3 seam (SPEC G-9): the network replays from a CUDA graph captured
once per input shape and, for the sizes with a sky head, the sky step runs eager on the replayed
outputs; the combined output is bit-identical to all-eager on two probe images (noise and a natural
image), fp32 and fp16, at the published 518 px. Also Results.depth from a graph equal to eager.
Skipped without CUDA. Not run yet (benchmarks/manifest.yaml ``gpu_tests_depth_anything3``): the
family's flags stay False until it passes and the parity rows (``parity_predict_depth_anything3``)
are committed."""

from __future__ import annotations

import pytest
import torch

pytestmark = pytest.mark.cuda

IMGSZ = 518


@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs CUDA")
@pytest.mark.parametrize("amp", [None, torch.float16], ids=["fp32", "fp16"])
@pytest.mark.parametrize("size", ["s", "b", "mono_l"])
def test_captured_network_plus_eager_sky_step_is_bitwise(size: str, amp: torch.dtype | None) -> None:
    from benchmarks.bench_rtdetr import _probes
    from libreyolo.graphs.runner import PredictGraphs
    from libreyolo.registry import families

    dev = torch.device("cuda", 0)
    torch.manual_seed(0)
    model = families()["depth_anything3"](size=size).to(dev)
    probes = list(_probes(1, IMGSZ, dev))  # two different images: catches a stale copy-in
    if model.has_sky:  # put about half the pixels above the sky threshold so that the eager step has work
        with torch.inference_mode():
            sky = model.net.eval()(probes[0])[1]
        with torch.no_grad():
            model.net.head.sky_conv3.bias += 0.3 - float(sky.median())
    graphs = PredictGraphs(model, force=True)
    for x in probes:
        eager = model.eager_forward(x, amp_dtype=amp)
        graph = graphs.run(x, policy=True, amp_dtype=amp)
        assert len(eager) == len(graph) == 2
        assert all(torch.equal(a, b) for a, b in zip(eager, graph, strict=True))
    info = graphs.info()["graphs"]
    assert len(info) == 1 and info[0]["replays"] >= 2
    assert [s["captured"] for s in info[0]["stages"]] == ([True, False] if model.has_sky else [True])
    graphs.release()


@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs CUDA")
def test_predict_on_cuda_with_graph_returns_the_same_map() -> None:
    from libreyolo import SAMPLE_IMAGE
    from libreyolo.graphs.runner import PredictGraphs
    from libreyolo.model import Model
    from libreyolo.registry import families

    torch.manual_seed(0)
    model = Model(families()["depth_anything3"](size="s")).to("cuda")
    model.backend.use_graphs(PredictGraphs(model.family, force=True))  # capture whatever the family flag says
    eager = model(SAMPLE_IMAGE, half=True)[0]
    graph = model(SAMPLE_IMAGE, half=True, cuda_graph=True)[0]
    assert eager.depth.shape == eager.orig_shape and torch.equal(eager.depth, graph.depth)
    assert model.graph_info()["graphs"], "the graph path was not taken"
