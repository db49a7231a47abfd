"""PIDNet on a real GPU: prediction graph replay bitwise against eager (fp32 and fp16; eval runs
the main head only), Results.semantic from a graph equal to eager, AMP training steps with the
four-term loss finite, and a short AMP training run on shapes-sem with and without capture."""

from __future__ import annotations

import pytest
import torch

from libreyolo import SAMPLE_IMAGE
from libreyolo.graphs.parity import build_probe_model, check_parity
from libreyolo.model import Model
from libreyolo.registry import families

pytestmark = pytest.mark.cuda
SIZES = list(families()["pidnet"].SIZES)


@pytest.mark.parametrize("size", SIZES)
@pytest.mark.parametrize("amp", [None, torch.float16], ids=["fp32", "fp16"])
def test_predict_graph_replay_is_bitwise(size: str, amp: torch.dtype | None) -> None:
    model = build_probe_model(families()["pidnet"], size=size, task="semantic", device="cuda", seed=0)
    row = check_parity(model, shape=(1, 3, 512, 512), amp_dtype=amp)
    assert row["result"] == "pass", row


def test_predict_on_cuda_with_graph_returns_the_same_map() -> None:
    from libreyolo.graphs.runner import PredictGraphs

    torch.manual_seed(0)
    model = Model(families()["pidnet"](size="s", nc=7)).to("cuda")
    model.backend.use_graphs(PredictGraphs(model.family, force=True))  # capture whatever the family flag says
    eager = model(SAMPLE_IMAGE, half=True)[0]
    graph = model(SAMPLE_IMAGE, half=True, cuda_graph=True)[0]
    assert eager.semantic.shape == eager.orig_shape and torch.equal(eager.semantic, graph.semantic)
    assert model.graph_info()["graphs"], "the graph path was not taken"


@pytest.mark.parametrize("amp", [torch.float16, torch.bfloat16], ids=["fp16", "bf16"])
def test_amp_train_steps_are_finite(amp: torch.dtype) -> None:
    torch.manual_seed(0)
    model = Model(families()["pidnet"](size="s", nc=6))
    net = model.net.to("cuda").train()
    criterion = model.build_criterion()
    opt = torch.optim.SGD(net.parameters(), lr=0.01, momentum=0.9)
    scaler = torch.amp.GradScaler("cuda", enabled=amp is torch.float16)
    g = torch.Generator("cuda").manual_seed(1)
    x = torch.rand(4, 3, 256, 256, device="cuda", generator=g)
    mask = torch.zeros(4, 256, 256, dtype=torch.int64, device="cuda")
    mask[:, 64:192, 32:160] = 2
    mask[:, 16:80, 150:240] = 4
    mask[:, :8] = -1
    for _ in range(4):
        with torch.autocast("cuda", dtype=amp):
            preds = net(x)
        loss, items = criterion(preds, {"mask": mask})
        assert bool(torch.isfinite(items).all()), items
        opt.zero_grad(set_to_none=True)
        scaler.scale(loss).backward()
        scaler.step(opt)
        scaler.update()
    assert all(bool(torch.isfinite(p).all()) for p in net.parameters())


@pytest.mark.parametrize("cuda_graph", [False, True], ids=["eager", "graph"])
def test_short_amp_training_on_shapes_sem(cuda_graph: bool, tmp_path) -> None:
    from libreyolo.data.shapes_sem import ensure_shapes_sem_dataset

    data = ensure_shapes_sem_dataset(tmp_path / "ds", n_train=32, n_val=8, imgsz=128)
    torch.manual_seed(0)
    model = Model(families()["pidnet"](size="s", nc=7))
    out = model.train(data=str(data), epochs=2, imgsz=128, batch=8, workers=2, device="0", amp=True,
                      cuda_graph=cuda_graph, project=str(tmp_path / "runs"), verbose=False, tensorboard=False,
                      plots=False)
    assert 0.0 <= out["mIoU"] <= 1.0 and out["best"]
    if cuda_graph:
        info = out["cuda_graph"]
        if type(model.family).SUPPORTS_TRAIN_CUDA_GRAPH:
            assert info["failed"] is None and info["graphs"] and info["graphs"][0]["replays"] > 0, info
        else:
            assert info["enabled"] is False and info["reason"], info
