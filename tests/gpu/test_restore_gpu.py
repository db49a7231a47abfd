"""NAFNet and RRDBNet on a real GPU: prediction graph replay bitwise against eager (every size,
fp32 and fp16), the restored image from a forced graph equal to eager's, training-capture parity
at step zero, and a short AMP training run on the restoration demos with and without training
capture. The parity rows these tests report decide the families' CUDA-graph flags."""

from __future__ import annotations

import copy

import pytest
import torch

from libreyolo import SAMPLE_IMAGE
from libreyolo.graphs.parity import build_probe_model, check_parity
from libreyolo.model import Model
from libreyolo.registry import families

pytestmark = pytest.mark.cuda
CASES = [(name, size) for name in ("nafnet", "esrgan") for size in families()[name].SIZES]
IDS = [f"{n}-{s}" for n, s in CASES]


@pytest.mark.parametrize("name,size", CASES, ids=IDS)
@pytest.mark.parametrize("amp", [None, torch.float16], ids=["fp32", "fp16"])
def test_predict_graph_replay_is_bitwise(name: str, size: str, amp: torch.dtype | None) -> None:
    model = build_probe_model(families()[name], size=size, task="restore", device="cuda", seed=0)
    row = check_parity(model, shape=(1, 3, 256, 256), amp_dtype=amp)
    assert row["result"] == "pass", row


@pytest.mark.parametrize("name", ["nafnet", "esrgan"])
def test_forced_graph_returns_the_eager_image(name: str) -> None:
    from libreyolo.graphs.runner import PredictGraphs

    cls = families()[name]
    torch.manual_seed(0)
    model = Model(cls(size=cls.SIZES[0])).to("cuda")
    model.backend.use_graphs(PredictGraphs(model.family, force=True))  # capture whatever the family flag says
    eager = model(SAMPLE_IMAGE, half=True)[0]
    graph = model(SAMPLE_IMAGE, half=True, cuda_graph=True)[0]
    assert tuple(eager.restored.shape) == (3, 480 * cls.SCALE, 640 * cls.SCALE)
    assert torch.equal(eager.restored, graph.restored)
    assert model.graph_info()["graphs"], "the graph path was not taken"


@pytest.mark.parametrize("name", ["nafnet", "esrgan"])
@pytest.mark.parametrize("amp", [None, torch.float16], ids=["fp32", "fp16"])
def test_training_capture_step_zero_is_bitwise(name: str, amp: torch.dtype | None) -> None:
    from benchmarks.parity_train import restore_batch
    from libreyolo.graphs.training import TrainGraphs

    cls = families()[name]
    torch.manual_seed(0)
    model = cls(size=cls.SIZES[0])
    base = model.net.to("cuda").train()
    batch = restore_batch(batch=4, imgsz=64, nc=1, seed=1, device=torch.device("cuda"), scale=cls.SCALE)

    def step(net: torch.nn.Module, graphs: TrainGraphs | None) -> tuple[torch.Tensor, dict[str, torch.Tensor]]:
        for p in net.parameters():
            p.grad = None
        if graphs is not None:
            preds = graphs.forward(batch["img"])
        else:
            with torch.autocast("cuda", dtype=amp or torch.float32, enabled=amp is not None):
                preds = net(batch["img"])
        loss, _ = model.build_criterion()(preds, batch)
        loss.backward()
        torch.cuda.synchronize()
        return loss.detach().clone(), {k: p.grad.detach().clone() for k, p in net.named_parameters()}

    eager_net, graph_net = copy.deepcopy(base), copy.deepcopy(base)
    loss_e, grads_e = step(eager_net, None)
    graphs = TrainGraphs(graph_net, requested=True, amp_dtype=amp, reason=None, repeats=1)
    loss_g, grads_g = step(graph_net, graphs)
    assert graphs.info()["graphs"], graphs.info()
    differing = [k for k in grads_e if not torch.equal(grads_e[k], grads_g[k])]
    print(f"{name} {amp or 'float32'}: loss bitwise={torch.equal(loss_e, loss_g)}, {len(differing)} gradients differ")
    # the training matrix's pass criterion (benchmarks/parity_train.py): the loss bit-identical;
    # gradients are classed there (exact, 1ulp, eager-noise, float-rounding), here only reported
    assert torch.equal(loss_e, loss_g), (float(loss_e), float(loss_g))


@pytest.mark.parametrize("cuda_graph", [False, True], ids=["eager", "graph"])
@pytest.mark.parametrize("name,kind", [("nafnet", "denoise"), ("esrgan", "sr")])
def test_short_amp_training_on_the_demos(name: str, kind: str, cuda_graph: bool, tmp_path) -> None:
    from libreyolo.data.shapes_restore import ensure_shapes_restore_dataset

    data = ensure_shapes_restore_dataset(tmp_path / "ds", kind=kind, n_train=32, n_val=8)
    cls = families()[name]
    torch.manual_seed(0)
    model = Model(cls(size=cls.SIZES[0]))
    out = model.train(data=str(data), epochs=2, imgsz=32, batch=8, workers=2, device="0", amp=True,
                      cuda_graph=cuda_graph, project=str(tmp_path / "runs"), verbose=False, tensorboard=False,
                      plots=False)
    assert 0.0 < out["psnr"] < 100.0 and out["best"]
    if cuda_graph:
        info = out["cuda_graph"]
        if cls.SUPPORTS_TRAIN_CUDA_GRAPH:
            assert info["failed"] is None and info["graphs"] and info["graphs"][0]["replays"] > 0, info
        else:
            assert info["enabled"] is False and info["reason"], info
