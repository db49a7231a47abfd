"""Classification families on a real GPU: predict with graphs (bitwise vs eager), Results.probs on
CUDA, a short AMP training run with and without training capture."""

from __future__ import annotations

import pytest
import torch

from libreyolo import SAMPLE_IMAGE
from libreyolo.graphs.parity import build_probe_model, check_parity
from libreyolo.kernels.attention import set_fused_attention
from libreyolo.model import Model
from libreyolo.registry import families

pytestmark = pytest.mark.cuda

CLS = sorted(n for n, c in families().items() if getattr(c, "OUTPUT_KIND", "boxes") == "probs")


@pytest.mark.parametrize("name", CLS)
@pytest.mark.parametrize("amp", [None, torch.float16], ids=["fp32", "fp16"])
def test_predict_graph_replay_is_bitwise(name: str, amp: torch.dtype | None) -> None:
    cls = families()[name]
    model = build_probe_model(cls, size=cls.SIZES[0], task="classify", device="cuda", seed=0)
    set_fused_attention(model.net, enabled=False)  # the equation both ways; fused on: test_vit_gpu.py
    row = check_parity(model, shape=(2, 3, 224, 224), amp_dtype=amp)
    assert row["result"] == "pass", row


GRAPH_CLS = [n for n in CLS if families()[n].SUPPORTS_CUDA_GRAPH]


@pytest.mark.parametrize("name", sorted(set(CLS) - set(GRAPH_CLS)) or ["none"])
def test_predict_with_graph_refuses_a_family_without_parity(name: str) -> None:
    if name == "none":
        assert all(families()[n].SUPPORTS_CUDA_GRAPH for n in CLS)
        return
    cls = families()[name]
    model = Model(cls(size=cls.SIZES[0], nc=6)).to("cuda")
    with pytest.raises(NotImplementedError, match=name):  # G-5: the flag, set from the parity matrix
        model(SAMPLE_IMAGE, cuda_graph=True)
    assert model(SAMPLE_IMAGE)[0].probs is not None  # eager still predicts


@pytest.mark.parametrize("name", GRAPH_CLS)
def test_predict_on_cuda_with_graph_returns_probs(name: str) -> None:
    cls = families()[name]
    torch.manual_seed(0)
    model = Model(cls(size=cls.SIZES[0], nc=6)).to("cuda")
    eager = model(SAMPLE_IMAGE, half=True)[0]
    graph = model(SAMPLE_IMAGE, half=True, cuda_graph=True)[0]
    assert eager.probs is not None and eager.probs.data.shape == (6,)
    assert torch.equal(eager.probs.data, graph.probs.data)
    assert model.graph_info()["graphs"], "the graph path was not taken"


@pytest.mark.parametrize("cuda_graph", [False, True], ids=["eager", "graph"])
def test_short_amp_training_on_shapes_cls(cuda_graph: bool, tmp_path) -> None:
    from libreyolo.data.shapes_cls import ensure_shapes_cls_dataset

    root = ensure_shapes_cls_dataset(tmp_path / "ds", n_train=32, n_val=8)
    cls = families()["mobilenetv4"]
    torch.manual_seed(0)
    model = Model(cls(size="conv_small", nc=6))
    out = model.train(data=str(root), epochs=2, imgsz=64, batch=16, workers=2, device="0", amp=True,
                      cuda_graph=cuda_graph, project=str(tmp_path / "runs"), verbose=False, tensorboard=False,
                      plots=False)
    assert 0.0 <= out["top1"] <= 1.0 and out["best"]
    if cuda_graph:  # the graph arm must really have replayed, not fallen back to eager
        info = out["cuda_graph"]
        if type(model.family).SUPPORTS_TRAIN_CUDA_GRAPH:
            assert info["failed"] is None and info["graphs"] and info["graphs"][0]["replays"] > 0, info
        else:
            assert info["enabled"] is False and info["reason"], info
