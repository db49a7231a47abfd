"""CPU tests of the training-capture policy (the CUDA capture itself is covered in tests/gpu)."""

from __future__ import annotations

import logging

import pytest
import torch
from torch import nn

from libreyolo.graphs import training as tg


class _Net(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.conv = nn.Conv2d(3, 4, 3, padding=1)
        self.bn = nn.BatchNorm2d(4)

    def forward(self, x: torch.Tensor) -> list[torch.Tensor]:
        return [self.bn(self.conv(x))]


def test_unsupported_configuration_logs_one_line_and_runs_eager(caplog: pytest.LogCaptureFixture) -> None:
    net = _Net().train()
    with caplog.at_level(logging.INFO, logger="libreyolo.graphs.training"):
        g = tg.TrainGraphs(net, requested=True, amp_dtype=None, reason="family 'x' has no verified training capture")
        x = torch.rand(2, 3, 8, 8)
        for _ in range(5):
            g.forward(x)
    lines = [r for r in caplog.records if r.name == "libreyolo.graphs.training"]
    assert len(lines) == 1 and "training eager" in lines[0].getMessage()
    assert not g.enabled and g.eager_steps == 5
    net.eval()  # eval-mode BN is deterministic: the eager path is the plain network
    assert torch.equal(g.forward(x)[0], net(x)[0])


def test_capture_waits_for_three_repeats_and_new_shapes_stay_eager(monkeypatch: pytest.MonkeyPatch) -> None:
    net = _Net().train()
    g = tg.TrainGraphs(net, requested=True, amp_dtype=None, reason=None)
    captured: list[tuple] = []

    def fake_capture(key: tuple, x: torch.Tensor) -> tg._TrainGraph:
        captured.append(tuple(x.shape))
        graph = tg._TrainGraph(wrapper=tg._AutocastForward(net, None), capture_ms=0.0)
        g._graphs[key] = graph
        return graph

    monkeypatch.setattr(g, "_capture", fake_capture)
    a, b = torch.rand(2, 3, 8, 8), torch.rand(1, 3, 8, 8)
    g.forward(a)
    g.forward(a)
    assert captured == []  # seen twice: still eager
    g.forward(b)  # a different shape (e.g. the last partial batch) does not count
    assert captured == []
    g.forward(a)
    assert captured == [(2, 3, 8, 8)]
    g.forward(a)
    assert captured == [(2, 3, 8, 8)]  # captured once, then replayed
    assert g._graphs[next(iter(g._graphs))].replays == 2
    assert g.eager_steps == 3


def test_replay_failure_warns_once_and_finishes_eager(caplog: pytest.LogCaptureFixture) -> None:
    net = _Net().train()
    g = tg.TrainGraphs(net, requested=True, amp_dtype=None, reason=None)
    x = torch.rand(2, 3, 8, 8)

    class Broken(nn.Module):
        def forward(self, x: torch.Tensor) -> None:
            raise RuntimeError("injected replay failure")

    g._graphs[g._key(x)] = tg._TrainGraph(wrapper=Broken(), capture_ms=0.0)
    with caplog.at_level(logging.WARNING, logger="libreyolo.graphs.training"):
        outs = [g.forward(x) for _ in range(4)]
    warnings = [r for r in caplog.records if r.levelno == logging.WARNING]
    assert len(warnings) == 1 and "injected replay failure" in warnings[0].getMessage()
    assert all(o[0].shape == (2, 4, 8, 8) for o in outs)
    assert not g.enabled and g.failed is not None and not g.live


def test_capture_failure_restores_buffers_and_continues(monkeypatch: pytest.MonkeyPatch) -> None:
    net = _Net().train()
    before = tg.snapshot_buffers(net)

    def boom(*args: object, **kwargs: object) -> None:
        net(torch.rand(2, 3, 8, 8))  # a warm-up forward moves BN statistics before failing
        raise RuntimeError("injected capture failure")

    monkeypatch.setattr(torch.cuda, "make_graphed_callables", boom)
    g = tg.TrainGraphs(net, requested=True, amp_dtype=None, reason=None)
    x = torch.rand(2, 3, 8, 8)
    assert g._capture(g._key(x), x) is None
    for k, b in net.named_buffers():
        assert torch.equal(b, before[k]), k
    assert g.failed is not None and "injected capture failure" in g.failed


def test_thread_local_substitution_is_restored_on_exception() -> None:
    import torch.cuda.graphs as graphs_module

    original = torch.cuda.CUDAGraph
    with pytest.raises(ValueError):
        with tg.thread_local_capture():
            assert torch.cuda.CUDAGraph is tg._ThreadLocalCUDAGraph
            assert graphs_module.CUDAGraph is tg._ThreadLocalCUDAGraph
            raise ValueError("boom")
    assert torch.cuda.CUDAGraph is original and graphs_module.CUDAGraph is original
    assert not tg._substitution_lock.locked()


def test_zero_grad_in_place_while_graph_live() -> None:
    net = _Net().train()
    opt = torch.optim.SGD(net.parameters(), lr=0.1)
    g = tg.TrainGraphs(net, requested=True, amp_dtype=None, reason=None)
    net(torch.rand(2, 3, 8, 8))[0].sum().backward()
    g.zero_grad(opt)
    assert all(p.grad is None for p in net.parameters())  # no graph: set_to_none
    g._graphs[("k",)] = tg._TrainGraph(wrapper=net, capture_ms=0.0)
    net(torch.rand(2, 3, 8, 8))[0].sum().backward()
    ptrs = [p.grad.data_ptr() for p in net.parameters()]
    g.zero_grad(opt)
    assert [p.grad.data_ptr() for p in net.parameters()] == ptrs  # zeroed in place
    assert all(torch.count_nonzero(p.grad) == 0 for p in net.parameters())


def test_unsupported_reason_rules() -> None:
    class Fam:
        FAMILY = "demo"
        SUPPORTS_TRAIN_CUDA_GRAPH = True
        TRAIN_CUDA_GRAPH_REASON = ""

    assert "CUDA" in tg.unsupported_reason(Fam(), device=torch.device("cpu"), distributed=False)
    # DDP is captured (the local network; gradients all-reduced outside the graphs) ...
    plain = nn.Sequential(nn.Conv2d(3, 4, 3), nn.BatchNorm2d(4))
    assert tg.unsupported_reason(Fam(), device=torch.device("cuda", 0), distributed=True, net=plain) is None
    # ... except with SyncBatchNorm, whose forward is a collective
    synced = nn.Sequential(nn.Conv2d(3, 4, 3), nn.SyncBatchNorm(4))
    why = tg.unsupported_reason(Fam(), device=torch.device("cuda", 0), distributed=True, net=synced)
    assert why is not None and "SyncBatchNorm" in why and "sync_bn=False" in why
    assert tg.unsupported_reason(Fam(), device=torch.device("cuda", 0), distributed=False, net=synced) is None
    assert tg.unsupported_reason(Fam(), device=torch.device("cuda", 0), distributed=False) is None
    Fam.SUPPORTS_TRAIN_CUDA_GRAPH = False
    assert "demo" in tg.unsupported_reason(Fam(), device=torch.device("cpu"), distributed=False)


def test_dry_run_takes_the_capture_path_on_cpu_but_never_captures(monkeypatch) -> None:
    """LIBREYOLO_TRAIN_CAPTURE_DRYRUN=1: a CPU run is capture-eligible, and TrainGraphs runs every
    batch eager on the bare network (repeated shapes included) without touching CUDA."""
    class Fam:
        FAMILY = "demo"
        SUPPORTS_TRAIN_CUDA_GRAPH = True
        TRAIN_CUDA_GRAPH_REASON = ""

    monkeypatch.setenv("LIBREYOLO_TRAIN_CAPTURE_DRYRUN", "1")
    assert tg.unsupported_reason(Fam(), device=torch.device("cpu"), distributed=True) is None
    net = nn.Sequential(nn.Conv2d(3, 4, 3), nn.BatchNorm2d(4)).train()
    g = tg.TrainGraphs(net, requested=True, amp_dtype=None, reason=None)
    x = torch.rand(2, 3, 8, 8)
    for _ in range(tg.REPEATS_BEFORE_CAPTURE + 2):
        assert torch.equal(g.forward(x), net(x))
    assert not g.live and g.eager_steps == tg.REPEATS_BEFORE_CAPTURE + 2 and g.failed is None
    monkeypatch.setenv("LIBREYOLO_TRAIN_CAPTURE_DRYRUN", "0")
    assert "CUDA" in tg.unsupported_reason(Fam(), device=torch.device("cpu"), distributed=False)
