"""yolo9_e2e on a GPU, what the parity matrix does not cover: the detections prediction makes from
the captured graph (network + the whole top-k selection, then only the conf threshold) equal the
eager network + eager postprocess bit for bit, and a CUDA training step of the dual loss matches
the CPU one. (The matrix rows compare replay with eager for the raw levels and the decode.)"""

from __future__ import annotations

import pytest
import torch

from libreyolo.graphs.parity import build_probe_model, probe_batch
from libreyolo.graphs.runner import PredictGraphs
from libreyolo.models.yolo9_e2e.family import YOLO9E2E
from libreyolo.ops.candidates import select_detections

pytestmark = pytest.mark.cuda


@pytest.mark.parametrize("size", YOLO9E2E.SIZES)
@pytest.mark.parametrize("amp", [None, torch.float16], ids=["fp32", "fp16"])
def test_captured_selection_equals_eager_postprocess_bitwise(size: str, amp: torch.dtype | None) -> None:
    model = build_probe_model(YOLO9E2E, size=size, task="detect", device="cuda", seed=0)
    runner = PredictGraphs(model, force=True, capacity=2)
    k = YOLO9E2E.DECODE_TOPK
    for i, kind in enumerate(("image", "uniform", "image")):  # capture, replay, replay of the first again
        x = probe_batch(kind, (2, 3, 320, 320), device="cuda", seed=i)
        cands = runner.run(x, policy=True, amp_dtype=amp, decoded=True)
        raw = model.eager_forward(x, amp_dtype=amp)
        for conf in (0.0, float(cands[..., 4].median())):  # everything; about half the candidates
            got = select_detections(cands, conf=conf, iou=0.7, max_det=k, agnostic=False, nms=False)
            want = model.postprocess(raw, conf=conf, iou=0.7, classes=None, max_det=k, agnostic=False)
            for g, w in zip(got, want, strict=True):
                assert torch.equal(g, w.cpu()), (size, amp, kind, conf)


@pytest.fixture
def _no_tf32():
    """fp32 convolutions and matmuls in full precision: cuDNN's default TF32 moves the loss by ~1e-2."""
    flags = torch.backends.cudnn.allow_tf32, torch.backends.cuda.matmul.allow_tf32
    torch.backends.cudnn.allow_tf32 = torch.backends.cuda.matmul.allow_tf32 = False
    yield
    torch.backends.cudnn.allow_tf32, torch.backends.cuda.matmul.allow_tf32 = flags


def test_training_step_on_cuda_matches_cpu(_no_tf32: None) -> None:
    torch.manual_seed(0)
    model = YOLO9E2E(size="t", nc=3)
    crit = model.build_criterion()
    x = torch.rand(2, 3, 128, 128)
    batch = {"batch_idx": torch.tensor([0, 0, 1]), "cls": torch.tensor([0, 2, 1]),
             "bboxes": torch.tensor([[0.3, 0.3, 0.2, 0.2], [0.6, 0.5, 0.3, 0.4], [0.5, 0.5, 0.5, 0.5]])}
    net = model.net.train()
    loss_cpu, items_cpu = crit(net(x), batch)
    net.cuda()
    loss_gpu, items_gpu = model.build_criterion()(net(x.cuda()), batch)
    assert items_gpu.shape == (6,) and torch.isfinite(loss_gpu)
    torch.testing.assert_close(items_gpu.cpu(), items_cpu, rtol=1e-3, atol=1e-4)
