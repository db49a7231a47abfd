"""GPU test of the PP-OCR seam (SPEC G-9): the text detector replays from a CUDA graph captured
once per input shape (bounded by the runner's cache cap), box extraction, cropping and the
recogniser run eager on the replayed probability map, and the combined output is bit-identical to
all-eager on two probe images (noise and a rendered text-demo scene). Skipped without CUDA. Not
run yet (benchmarks/manifest.yaml ``gpu_tests_ppocr``): the flag stays False until it passes and
the parity rows (``parity_predict_ppocr``) are committed."""

from __future__ import annotations

import numpy as np
import pytest
import torch

pytestmark = pytest.mark.cuda


def _probes(imgsz: int, device: torch.device) -> list[torch.Tensor]:
    from libreyolo.data.shapes_ocr import render_text_scene

    g = torch.Generator().manual_seed(0)
    noise = torch.rand(1, 3, imgsz, imgsz, generator=g)
    img, _ = render_text_scene(0, 1, 0, imgsz=imgsz)
    text = torch.from_numpy(np.ascontiguousarray(img[:, :, ::-1])).permute(2, 0, 1).float().div(255.0)[None]
    return [noise.to(device), text.to(device)]


def _model(size: str, texty: bool, dev: torch.device):  # noqa: ANN202
    from libreyolo.models.ppocr.family import PPOCR

    torch.manual_seed(0)
    fam = PPOCR(size=size)
    if texty:  # the detector answers "text everywhere": the recogniser gets a region on every probe
        torch.nn.init.constant_(fam.net.det.binarize.conv3.bias, 8.0)
        torch.nn.init.zeros_(fam.net.det.binarize.conv3.weight)
    fam.net.eval()
    return fam.fuse().to(dev)


@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs CUDA")
@pytest.mark.parametrize("amp", [None, torch.float16], ids=["fp32", "fp16"])
@pytest.mark.parametrize("size,texty", [("tiny", True), ("v4", False), ("v4", True)])
def test_captured_detector_plus_eager_recogniser_is_bitwise(size: str, texty: bool, amp: torch.dtype | None) -> None:
    from libreyolo.graphs.runner import PredictGraphs

    dev = torch.device("cuda", 0)
    model = _model(size, texty, dev)
    imgsz = 64 if size == "tiny" else 640
    graphs = PredictGraphs(model, force=True)
    for x in _probes(imgsz, dev):  # two different images: catches a stale copy-in
        eager = model.eager_forward(x, amp_dtype=amp)
        graph = graphs.run(x, policy=True, amp_dtype=amp)
        assert len(eager) == len(graph) == 6
        assert all(torch.equal(a, b) for a, b in zip(eager, graph, strict=True))
        if texty:
            assert graph[1].shape[0] >= 1  # regions reached the eager recogniser
    info = graphs.info()["graphs"]
    assert len(info) == 1 and [s["captured"] for s in info[0]["stages"]] == [True, False]
    graphs.release()


@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs CUDA")
def test_one_detector_graph_per_shape_bounded_by_the_cache_cap() -> None:
    from libreyolo.graphs.runner import PredictGraphs

    dev = torch.device("cuda", 0)
    model = _model("tiny", True, dev)
    graphs = PredictGraphs(model, force=True, capacity=2)
    shapes = [(64, 64), (64, 96), (96, 64)]
    for h, w in shapes + shapes[-1:]:
        x = torch.rand(1, 3, h, w, device=dev)
        eager = model.eager_forward(x)
        graph = graphs.run(x, policy=True)
        assert all(torch.equal(a, b) for a, b in zip(eager, graph, strict=True))
    assert len(graphs.info()["graphs"]) == 2  # the third shape evicted the least recently used one
    graphs.release()
