"""FOMO on a real GPU: prediction graph replay bitwise against eager (both sizes, fp32 and fp16),
Results.points from a graph equal to eager, training capture at step zero equal to eager (the
parity harness's criterion: loss bit-identical, no BatchNorm buffer differs) and a short AMP
training run on shapes with and without training capture."""

from __future__ import annotations

import pytest
import torch

from libreyolo import SAMPLE_IMAGE
from libreyolo.graphs.parity import build_probe_model, check_parity
from libreyolo.model import Model
from libreyolo.registry import families

pytestmark = pytest.mark.cuda
SIZES = list(families()["fomo"].SIZES)


@pytest.mark.parametrize("size", SIZES)
@pytest.mark.parametrize("amp", [None, torch.float16], ids=["fp32", "fp16"])
def test_predict_graph_replay_is_bitwise(size: str, amp: torch.dtype | None) -> None:
    model = build_probe_model(families()["fomo"], size=size, task="point", device="cuda", seed=0, imgsz=320)
    row = check_parity(model, shape=(1, 3, 320, 320), amp_dtype=amp)
    assert row["result"] == "pass", row


def test_predict_on_cuda_with_graph_returns_the_same_points() -> None:
    from libreyolo.graphs.runner import PredictGraphs

    torch.manual_seed(0)
    model = Model(families()["fomo"](size="035", nc=3)).to("cuda")
    model.backend.use_graphs(PredictGraphs(model.family, force=True))  # capture whatever the family flag says
    for half in (False, True):
        eager = model(SAMPLE_IMAGE, half=half, conf=0.0)[0]
        graph = model(SAMPLE_IMAGE, half=half, conf=0.0, cuda_graph=True)[0]
        assert eager.points is not None and torch.equal(eager.points, graph.points)
    assert model.graph_info()["graphs"], "the graph path was not taken"


@pytest.mark.parametrize("size", SIZES)
@pytest.mark.parametrize("amp", [None, torch.float16], ids=["fp32", "fp16"])
def test_training_capture_step_zero_equals_eager(size: str, amp: torch.dtype | None) -> None:
    from benchmarks.parity_train import run_row

    row = run_row(families()["fomo"], size, amp, batch=16, imgsz=320)
    print({k: row[k] for k in ("size", "dtype", "loss_bit_identical", "numerics_class", "max_ulp")})
    assert row["captured"] and row["loss_bit_identical"] and not row["bn_buffers_differing"], row


@pytest.mark.parametrize("cuda_graph", [False, True], ids=["eager", "graph"])
def test_short_amp_training_on_shapes(cuda_graph: bool, tmp_path) -> None:
    from libreyolo.data.shapes import ensure_shapes_dataset

    data = ensure_shapes_dataset(tmp_path / "ds", n_train=32, n_val=8, imgsz=160)
    torch.manual_seed(0)
    model = Model(families()["fomo"](size="035", nc=6))
    out = model.train(data=str(data), epochs=2, imgsz=160, batch=8, workers=2, device="0", amp=True,
                      cuda_graph=cuda_graph, project=str(tmp_path / "runs"), verbose=False, tensorboard=False,
                      plots=False)
    assert 0.0 <= out["F1"] <= 1.0 and out["best"]
    if cuda_graph:
        info = out["cuda_graph"]
        if type(model.family).SUPPORTS_TRAIN_CUDA_GRAPH:
            assert info["failed"] is None and info["graphs"] and info["graphs"][0]["replays"] > 0, info
        else:
            assert info["enabled"] is False and info["reason"], info
