"""GPU tests of the RT-DETR families' capture (SPEC G-4, G-9, T-6). Skipped without CUDA."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest
import torch

pytestmark = pytest.mark.cuda
sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "benchmarks"))

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
    from bench_rtdetr import _families, _probes

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
    from bench_rtdetr import TrainArm, _families, _max_rel, _synthetic_batch, global_rel

    dev = torch.device("cuda", 0)
    fam = _families()[family]
    data = _synthetic_batch(BATCH, IMGSZ, dev)
    eager = TrainArm(fam, "r18", device=dev, amp=None, graph=False)
    eager_b = TrainArm(fam, "r18", device=dev, amp=None, graph=False)
    seam = TrainArm(fam, "r18", device=dev, amp=None, graph=True)
    loss_e, g_e = eager.step(data, grads=True)
    _, g_b = eager_b.step(data, grads=True)
    loss_s, g_s = seam.step(data, grads=True)
    assert seam.tg is not None and seam.tg.failed is None and seam.tg.live
    assert torch.equal(loss_e, loss_s)  # step 0: bit-identical loss (T-6)
    for (k, a), (_, b) in zip(eager.net.named_buffers(), seam.net.named_buffers(), strict=True):
        assert torch.equal(a, b), f"buffer {k} drifted under capture warm-up"
    # Gradients: over all parameters together, the graph arm may differ from eager no more than
    # two eager runs differ from each other (atomics in the decoder's backward), with a floor for
    # when eager happens to repeat exactly. Single tensors are not compared relatively: the bias of
    # a BatchNorm that feeds another BatchNorm has a gradient of pure cancellation noise.
    diff, spread = global_rel(g_e, g_s), global_rel(g_e, g_b)
    worst, at = _max_rel(g_e, g_s)
    assert diff <= max(1e-5, 4 * spread), (
        f"gradients differ by {diff:.3g} (global relative; eager-vs-eager {spread:.3g}; worst tensor {at} {worst:.3g})")
    for _ in range(2):  # replays keep training
        loss, _ = seam.step(data)
        assert torch.isfinite(loss)
    assert seam.tg.info()["graphs"][0]["replays"] >= 2


def test_train_seam_with_an_empty_batch() -> None:
    from bench_rtdetr import TrainArm, _families

    dev = torch.device("cuda", 0)
    arm = TrainArm(_families()["rtdetr"], "r18", device=dev, amp=torch.float16, graph=True)
    empty = {"img": torch.rand(BATCH, 3, IMGSZ, IMGSZ, device=dev),
             "batch_idx": torch.zeros(0, dtype=torch.long, device=dev),
             "cls": torch.zeros(0, dtype=torch.long, device=dev), "bboxes": torch.zeros(0, 4, device=dev)}
    for _ in range(3):
        loss, _ = arm.step(empty)
        assert torch.isfinite(loss)
    assert arm.tg is not None and arm.tg.failed is None
