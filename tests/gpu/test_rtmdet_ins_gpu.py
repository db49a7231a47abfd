"""rtmdet_ins on a real GPU: prediction graph replay of the network (mask features and kernel
parameters included) bitwise equal to eager (every size, fp32 and fp16), Results from a graph equal
to eager (boxes and the masks the eager dynamic convolution assembles after NMS), the dynamic
convolution on CUDA equal to CPU, and a short AMP training run on shapes-seg with and without
training capture."""

from __future__ import annotations

import pytest
import torch

from libreyolo import SAMPLE_IMAGE
from libreyolo.graphs.parity import build_probe_model, check_parity
from libreyolo.model import Model
from libreyolo.registry import families

pytestmark = pytest.mark.cuda
SIZES = list(families()["rtmdet_ins"].SIZES)


@pytest.mark.parametrize("size", SIZES)
@pytest.mark.parametrize("amp", [None, torch.float16], ids=["fp32", "fp16"])
def test_predict_graph_replay_is_bitwise(size: str, amp: torch.dtype | None) -> None:
    model = build_probe_model(families()["rtmdet_ins"], size=size, task="segment", device="cuda", seed=0)
    row = check_parity(model, shape=(1, 3, 640, 640), amp_dtype=amp)
    assert row["result"] == "pass", row


def test_predict_on_cuda_with_graph_returns_the_same_boxes_and_masks() -> None:
    from libreyolo.graphs.runner import PredictGraphs

    torch.manual_seed(0)
    model = Model(families()["rtmdet_ins"](size="t", nc=6)).to("cuda")
    model.backend.use_graphs(PredictGraphs(model.family, force=True))  # capture whatever the family flag says
    eager = model(SAMPLE_IMAGE, half=True, conf=0.0, max_det=20)[0]
    graph = model(SAMPLE_IMAGE, half=True, conf=0.0, max_det=20, cuda_graph=True)[0]
    assert eager.masks.data.shape == (20, *eager.orig_shape)
    assert torch.equal(eager.boxes.data, graph.boxes.data) and torch.equal(eager.masks.data, graph.masks.data)
    assert model.graph_info()["graphs"], "the graph path was not taken"


def test_dynamic_convolution_on_cuda_equals_cpu() -> None:
    from libreyolo.models.rtmdet_ins.postprocess import dynamic_mask_logits

    torch.manual_seed(0)
    feat, kernels = torch.randn(8, 80, 80), torch.randn(100, 169) * 0.3
    points, strides = torch.rand(100, 2) * 640, torch.tensor([8.0, 16.0, 32.0]).repeat(34)[:100]
    cpu = dynamic_mask_logits(feat, kernels, points, strides, feat_stride=8)
    gpu = dynamic_mask_logits(feat.cuda(), kernels.cuda(), points.cuda(), strides.cuda(), feat_stride=8)
    assert torch.allclose(cpu, gpu.cpu(), rtol=1e-4, atol=1e-4)


@pytest.mark.parametrize("cuda_graph", [False, True], ids=["eager", "graph"])
def test_short_amp_training_on_shapes_seg(cuda_graph: bool, tmp_path) -> None:
    from libreyolo.data.shapes_seg import ensure_shapes_seg_dataset

    data = ensure_shapes_seg_dataset(tmp_path / "ds", n_train=32, n_val=8, imgsz=160)
    torch.manual_seed(0)
    model = Model(families()["rtmdet_ins"](size="t", nc=6))
    out = model.train(data=str(data), epochs=2, imgsz=128, batch=8, workers=2, device="0", amp=True,
                      cuda_graph=cuda_graph, project=str(tmp_path / "runs"), verbose=False, tensorboard=False,
                      plots=False)
    assert 0.0 <= out["mask_mAP50-95"] <= 1.0 and out["best"]
    if cuda_graph:
        info = out["cuda_graph"]
        if type(model.family).SUPPORTS_TRAIN_CUDA_GRAPH:
            assert info["failed"] is None and info["graphs"] and info["graphs"][0]["replays"] > 0, info
        else:
            assert info["enabled"] is False and info["reason"], info
