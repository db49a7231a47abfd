"""GPU tests of the DEIMv2 / RT-DETRv4 families' capture (SPEC G-4, G-9, T-6), as test_dfine_gpu.py
for D-FINE / DEIM. Skipped without CUDA. Their results decide the families' flags (both False until
the parity rows exist: benchmarks/manifest.yaml, parity_predict_deimv2_rtdetrv4 / parity_train_...)."""

from __future__ import annotations

import pytest
import torch

pytestmark = pytest.mark.cuda

IMGSZ, BATCH = 320, 2
SIZES = [("deimv2", "atto"), ("deimv2", "femto"), ("deimv2", "pico"), ("deimv2", "n"), ("rtdetrv4", "s"), ("rtdetrv4", "m")]


@pytest.fixture(autouse=True)
def _portable(monkeypatch: pytest.MonkeyPatch):
    from libreyolo.kernels import registry

    monkeypatch.setenv("LIBREYOLO_KERNELS", "off")
    registry.clear_cache()
    yield
    registry.clear_cache()


def _family(name: str) -> type:
    from libreyolo.registry import families

    return families()[name]


@pytest.mark.parametrize("family,size", SIZES)
@pytest.mark.parametrize("amp", [None, torch.float16], ids=["fp32", "fp16"])
def test_predict_capture_is_bitwise(family: str, size: str, amp: torch.dtype | None) -> None:
    from benchmarks.bench_rtdetr import _probes
    from libreyolo.graphs.runner import PredictGraphs

    dev = torch.device("cuda", 0)
    torch.manual_seed(0)
    model = _family(family)(size=size, nc=80).to(dev)
    graphs = PredictGraphs(model, force=True)
    for x in _probes(BATCH, IMGSZ, dev):
        eager = model.eager_forward(x, amp_dtype=amp)
        graph = graphs.run(x, policy=True, amp_dtype=amp)
        assert all(torch.equal(a, b) for a, b in zip(eager, graph, strict=True))
    info = graphs.info()["graphs"][0]
    assert [s["captured"] for s in info["stages"]] == [True, True] and info["replays"] == 2
    graphs.release()


@pytest.mark.parametrize("family,size", [("deimv2", "atto"), ("rtdetrv4", "s")])
def test_train_seam_step_zero_matches_eager(family: str, size: str) -> None:
    from seam_checks import assert_seam_step_zero_matches_eager

    assert_seam_step_zero_matches_eager(_family(family), size)


@pytest.mark.parametrize("family,size", [("deimv2", "atto"), ("rtdetrv4", "s")])
def test_train_with_an_empty_batch_on_gpu(family: str, size: str) -> None:
    from benchmarks.bench_rtdetr import TrainArm

    dev = torch.device("cuda", 0)
    arm = TrainArm(_family(family), size, device=dev, amp=None, graph=False)
    empty = {"img": torch.rand(BATCH, 3, IMGSZ, IMGSZ, device=dev),
             "batch_idx": torch.zeros(0, dtype=torch.long, device=dev),
             "cls": torch.zeros(0, dtype=torch.long, device=dev), "bboxes": torch.zeros(0, 4, device=dev)}
    for _ in range(3):
        loss, _ = arm.step(empty)
        assert torch.isfinite(loss)
