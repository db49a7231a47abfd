"""GPU test of the SAM / MobileSAM seam (SPEC G-9): the image encoder replays from a CUDA graph
captured once per input shape, the prompt encoder + mask decoder run eager per prompt on the
replayed embedding, and the combined output is bit-identical to all-eager on two probe images
(noise and a natural image), for two different prompt sets on the same captured graph. Skipped
without CUDA. Not run yet (benchmarks/manifest.yaml ``gpu_tests_sam``): the families' flags stay
False until it passes and the parity rows are committed."""

from __future__ import annotations

import pytest
import torch

pytestmark = pytest.mark.cuda

BATCH = 1


def _prompt_sets(imgsz: int) -> list[object]:
    from libreyolo.models._sam.prompt import Prompts

    s = float(imgsz)
    return [
        None,  # the default centre point
        Prompts(points=torch.tensor([[[0.3 * s, 0.4 * s], [0.7 * s, 0.2 * s]]]), labels=torch.tensor([[1, 0]]),
                multimask=True),
        Prompts(boxes=torch.tensor([[0.1 * s, 0.1 * s, 0.6 * s, 0.5 * s], [0.4 * s, 0.3 * s, 0.9 * s, 0.95 * s]])),
    ]


@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs CUDA")
@pytest.mark.parametrize("amp", [None, torch.float16], ids=["fp32", "fp16"])
@pytest.mark.parametrize("family,size", [("sam", "vit_b"), ("mobilesam", "vit_t"), ("sam", "tiny")])
def test_captured_encoder_plus_eager_decoder_is_bitwise(family: str, size: str, amp: torch.dtype | None) -> None:
    from benchmarks.bench_rtdetr import _probes
    from libreyolo.graphs.runner import PredictGraphs
    from libreyolo.registry import families

    dev = torch.device("cuda", 0)
    torch.manual_seed(0)
    model = families()[family](size=size).to(dev)
    imgsz = model.imgsz
    graphs = PredictGraphs(model, force=True)
    for x in _probes(BATCH, imgsz, dev):  # two different images: catches a stale copy-in
        for prompts in _prompt_sets(imgsz):
            with model.prompting(prompts):
                eager = model.eager_forward(x, amp_dtype=amp)
                graph = graphs.run(x, policy=True, amp_dtype=amp)
            assert len(eager) == len(graph) == 3
            assert all(torch.equal(a, b) for a, b in zip(eager, graph, strict=True))
    info = graphs.info()["graphs"]
    assert len(info) == 1  # one graph per image size, reused by every prompt set
    assert [s["captured"] for s in info[0]["stages"]] == [True, False]
    assert info[0]["replays"] >= 5
    graphs.release()
