"""yolonas_pose on a real GPU: prediction graph replay of the network bitwise equal to eager (every
size, fp32 and fp16), the criterion on CUDA equal to its CPU result, Results from a graph equal to
eager (boxes and keypoints), and a short AMP training run on shapes-pose with and without
training capture.

Run on a GPU machine: ``python -m pytest tests/gpu/test_yolonas_pose_gpu.py -q``.
"""

from __future__ import annotations

import pytest
import torch

from libreyolo import SAMPLE_IMAGE
from libreyolo.graphs.parity import build_probe_model, check_parity
from libreyolo.model import Model
from libreyolo.registry import families

pytestmark = pytest.mark.cuda
FAMILY = "yolonas_pose"
SIZES = list(families()[FAMILY].SIZES)


@pytest.mark.parametrize("size", SIZES)
@pytest.mark.parametrize("amp", [None, torch.float16], ids=["fp32", "fp16"])
def test_predict_graph_replay_is_bitwise(size: str, amp: torch.dtype | None) -> None:
    model = build_probe_model(families()[FAMILY], size=size, task="pose", device="cuda", seed=0)
    row = check_parity(model, shape=(1, 3, 640, 640), amp_dtype=amp)
    assert row["result"] == "pass", row


def test_criterion_on_cuda_equals_cpu() -> None:
    from libreyolo.models.yolonas_pose.loss import YOLONASPoseLoss
    from libreyolo.models.yolonas_pose.nn import build_yolonas_pose

    torch.manual_seed(0)
    net = build_yolonas_pose(size="n", nc=2, nkpt=5).train()
    x = torch.rand(2, 3, 128, 128)
    kpts = torch.rand(3, 5, 3)
    kpts[..., 2] = 2.0
    batch = {"batch_idx": torch.tensor([0, 0, 1]), "cls": torch.tensor([0, 1, 1]),
             "bboxes": torch.tensor([[0.3, 0.3, 0.3, 0.3], [0.7, 0.6, 0.4, 0.5], [0.5, 0.5, 0.6, 0.6]]),
             "keypoints": kpts}
    preds = net(x)
    _, cpu = YOLONASPoseLoss(net)(preds, batch)
    gpu_preds = [p.detach().cuda() for p in preds]
    _, gpu = YOLONASPoseLoss(net)(gpu_preds, batch)
    assert torch.allclose(cpu, gpu.cpu(), rtol=1e-4, atol=1e-5), (cpu, gpu)


def test_predict_on_cuda_with_graph_returns_the_same_boxes_and_keypoints() -> None:
    from libreyolo.graphs.runner import PredictGraphs

    torch.manual_seed(0)
    model = Model(families()[FAMILY](size="n", nc=2))
    model.family.set_arch(nkpt=5)
    model = model.to("cuda")
    model.backend.use_graphs(PredictGraphs(model.family, force=True))  # capture whatever the family flag says
    eager = model(SAMPLE_IMAGE, half=True, conf=0.0, max_det=20)[0]
    graph = model(SAMPLE_IMAGE, half=True, conf=0.0, max_det=20, cuda_graph=True)[0]
    assert eager.keypoints.shape == (20, 5, 3)
    assert torch.equal(eager.boxes.data, graph.boxes.data) and torch.equal(eager.keypoints.data, graph.keypoints.data)
    assert model.graph_info()["graphs"], "the graph path was not taken"


@pytest.mark.parametrize("cuda_graph", [False, True], ids=["eager", "graph"])
def test_short_amp_training_on_shapes_pose(cuda_graph: bool, tmp_path) -> None:  # noqa: ANN001 - fixture
    from libreyolo.data.shapes_pose import ensure_shapes_pose_dataset

    data = ensure_shapes_pose_dataset(tmp_path / "ds", n_train=32, n_val=8, imgsz=160)
    torch.manual_seed(0)
    model = Model(families()[FAMILY](size="n", nc=2))
    out = model.train(data=str(data), epochs=2, imgsz=128, batch=8, workers=2, device="0", amp=True,
                      cuda_graph=cuda_graph, project=str(tmp_path / "runs"), verbose=False, tensorboard=False,
                      plots=False)
    assert model.nkpt == 5 and 0.0 <= out["kpt_mAP50-95"] <= 1.0 and out["best"]
    if cuda_graph:
        info = out["cuda_graph"]
        if type(model.family).SUPPORTS_TRAIN_CUDA_GRAPH:
            assert info["failed"] is None and info["graphs"] and info["graphs"][0]["replays"] > 0, info
        else:
            assert info["enabled"] is False and info["reason"], info
