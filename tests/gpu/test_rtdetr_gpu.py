"""GPU tests of the RT-DETR families' capture (SPEC G-4, G-9, T-6). Skipped without CUDA."""

from __future__ import annotations

import pytest
import torch

pytestmark = pytest.mark.cuda

IMGSZ, BATCH = 320, 2


@pytest.fixture(autouse=True)
def _portable(monkeypatch: pytest.MonkeyPatch):
    from libreyolo.kernels import registry

    monkeypatch.setenv("LIBREYOLO_KERNELS", "off")  # capture safety of the portable path (K-12)
    registry.clear_cache()
    yield
    registry.clear_cache()


@pytest.mark.parametrize("family", ["rtdetr", "rtdetrv2"])
@pytest.mark.parametrize("amp", [None, torch.float16], ids=["fp32", "fp16"])
def test_predict_capture_is_bitwise(family: str, amp: torch.dtype | None) -> None:
    from benchmarks.bench_rtdetr import _families, _probes
    from libreyolo.graphs.runner import PredictGraphs

    dev = torch.device("cuda", 0)
    torch.manual_seed(0)
    model = _families()[family](size="r18", nc=80).to(dev)
    graphs = PredictGraphs(model, force=True)
    for x in _probes(BATCH, IMGSZ, dev):  # two different distributions: catches a stale copy-in
        eager = model.eager_forward(x, amp_dtype=amp)
        graph = graphs.run(x, policy=True, amp_dtype=amp)
        assert all(torch.equal(a, b) for a, b in zip(eager, graph, strict=True))
    info = graphs.info()["graphs"][0]
    assert [s["captured"] for s in info["stages"]] == [True, True] and info["replays"] == 2
    graphs.release()


@pytest.mark.parametrize("family", ["rtdetr", "rtdetrv2"])
def test_train_seam_step_zero_matches_eager(family: str) -> None:
    from seam_checks import assert_seam_step_zero_matches_eager

    from benchmarks.bench_rtdetr import _families

    seam = assert_seam_step_zero_matches_eager(_families()[family], "r18")
    assert seam.tg.info()["graphs"][0]["replays"] >= 2


def test_train_seam_with_an_empty_batch() -> None:
    from benchmarks.bench_rtdetr import TrainArm, _families

    dev = torch.device("cuda", 0)
    arm = TrainArm(_families()["rtdetr"], "r18", device=dev, amp=torch.float16, graph=True)
    empty = {"img": torch.rand(BATCH, 3, IMGSZ, IMGSZ, device=dev),
             "batch_idx": torch.zeros(0, dtype=torch.long, device=dev),
             "cls": torch.zeros(0, dtype=torch.long, device=dev), "bboxes": torch.zeros(0, 4, device=dev)}
    for _ in range(3):
        loss, _ = arm.step(empty)
        assert torch.isfinite(loss)
    assert arm.tg is not None and arm.tg.failed is None
