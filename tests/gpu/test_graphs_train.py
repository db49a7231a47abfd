"""GPU tests of training capture (SPEC T-3..T-7). Run on the lent GPU; skipped without CUDA."""

from __future__ import annotations

import copy
from pathlib import Path

import pytest
import torch
from torch import nn

from libreyolo.graphs.training import TrainGraphs

pytestmark = pytest.mark.cuda


def _model_and_batches(imgsz: int = 128, batch: int = 4):
    from benchmarks.parity_train import synthetic_batch
    from libreyolo import LibreYOLO

    torch.manual_seed(0)
    model = LibreYOLO("LibreYOLO9t.pt", pretrained=False, nc=6)
    model.net.cuda().train()
    dev = torch.device("cuda", 0)
    return model, [synthetic_batch(batch=batch, imgsz=imgsz, nc=6, seed=s, device=dev) for s in (1, 2)]


def _grads(net: nn.Module) -> dict[str, torch.Tensor]:
    return {k: p.grad.detach().clone() for k, p in net.named_parameters() if p.grad is not None}


def test_step_zero_loss_and_bn_buffers_bit_identical() -> None:
    model, (b1, _) = _model_and_batches()
    eager_net, graph_net = copy.deepcopy(model.net), copy.deepcopy(model.net)
    model.net = eager_net
    loss_e, _ = model.build_criterion()(eager_net(b1["img"]), b1)
    loss_e.backward()
    model.net = graph_net
    g = TrainGraphs(graph_net, requested=True, amp_dtype=None, reason=None, repeats=1)
    loss_g, _ = model.build_criterion()(g.forward(b1["img"]), b1)
    loss_g.backward()
    assert g.info()["graphs"], g.info()
    assert torch.equal(loss_e.detach(), loss_g.detach())
    for (k, be), (_, bg) in zip(eager_net.named_buffers(), graph_net.named_buffers(), strict=True):
        assert torch.equal(be, bg), k


def test_gradient_accumulation_sums_micro_batches_under_capture() -> None:
    """T-7: two micro-batches accumulate g1 + g2 (not 2 x g2) while the graph is live.

    Under AMP yolo9's step-zero gradients are bit-identical to eager (see the training parity
    matrix), so the accumulated sum must match eager to float rounding of the two additions.
    """
    model, (b1, b2) = _model_and_batches()
    eager_net, graph_net = copy.deepcopy(model.net), copy.deepcopy(model.net)
    crit = model.build_criterion

    def eager(b: dict) -> torch.Tensor:
        with torch.autocast("cuda", dtype=torch.float16):
            preds = eager_net(b["img"])
        return crit()(preds, b)[0]

    model.net = eager_net
    for b in (b1, b2):
        eager(b).backward()
    g_sum = _grads(eager_net)
    eager_net.zero_grad(set_to_none=True)
    eager(b2).backward()
    g2 = _grads(eager_net)

    model.net = graph_net
    opt = torch.optim.SGD(graph_net.parameters(), lr=0.0)
    g = TrainGraphs(graph_net, requested=True, amp_dtype=torch.float16, reason=None, repeats=1)
    g.zero_grad(opt)
    for b in (b1, b2):
        crit()(g.forward(b["img"]), b)[0].backward()
    assert g.info()["graphs"][0]["replays"] == 2
    got = _grads(graph_net)
    num = den_sum = den_double = 0.0
    for k in g_sum:
        num += float((got[k] - g_sum[k]).norm())
        den_sum += float(g_sum[k].norm())
        den_double += float((got[k] - 2 * g2[k]).norm())
    assert num <= 1e-5 * den_sum, (num, den_sum)
    assert den_double > 1e-2 * den_sum  # clearly not twice the last micro-batch


def test_capture_failure_mid_run_finishes_eager(monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture) -> None:
    model, (b1, _) = _model_and_batches()

    def boom(*a: object, **k: object) -> None:
        raise RuntimeError("injected capture failure")

    monkeypatch.setattr(torch.cuda, "make_graphed_callables", boom)
    g = TrainGraphs(model.net, requested=True, amp_dtype=torch.float16, reason=None, repeats=1)
    crit = model.build_criterion()
    for _ in range(3):
        loss, _ = crit(g.forward(b1["img"]), b1)
        loss.backward()
        assert torch.isfinite(loss)
    assert g.failed and "injected" in g.failed and g.eager_steps == 3
    assert sum("disabled for the rest" in r.getMessage() for r in caplog.records) == 1


class _Noise(torch.utils.data.Dataset):
    def __len__(self) -> int:
        return 256

    def __getitem__(self, i: int) -> torch.Tensor:
        return torch.rand(3, 32, 32)


def test_pinned_memory_loader_workers_during_repeated_captures() -> None:
    """T-5 / G-7: pin-memory thread allocations while capturing must not poison the capture."""
    net = nn.Sequential(nn.Conv2d(3, 16, 3, padding=1), nn.BatchNorm2d(16), nn.SiLU(), nn.Conv2d(16, 8, 1)).cuda().train()
    loader = torch.utils.data.DataLoader(_Noise(), batch_size=8, num_workers=4, pin_memory=True)
    captures = 0
    for _epoch in range(2):
        for x in loader:
            g = TrainGraphs(net, requested=True, amp_dtype=torch.float16, reason=None, repeats=1)
            out = g.forward(x.cuda(non_blocking=True))
            out.float().mean().backward()
            assert g.failed is None, g.failed
            captures += 1
            g.release()
    assert captures == 64


class _SyncsInForward(nn.Module):
    """Calls ``.item()`` in its forward: a real capture failure (host sync while capturing)."""

    def __init__(self) -> None:
        super().__init__()
        self.conv = nn.Conv2d(3, 8, 3, padding=1)
        self.drop = nn.Dropout(0.5)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        y = self.conv(x)
        if y.abs().max().item() < 0:  # never true; the sync is the point
            y = -y
        return y


def test_real_capture_failure_leaves_random_ops_usable() -> None:
    """T-4: after a capture that really fails, eager random ops run and draw the same numbers as
    they would have without the failed capture (generator state recovered, stream position kept)."""
    net = _SyncsInForward().cuda().train()
    x = torch.rand(2, 3, 16, 16, device="cuda")
    # a graph with a random op, captured before the failure, must keep replaying after it
    noise = torch.empty(32, device="cuda")
    side = torch.cuda.Stream()
    side.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(side):
        noise.uniform_()
    torch.cuda.current_stream().wait_stream(side)
    earlier = torch.cuda.CUDAGraph()
    with torch.cuda.graph(earlier, capture_error_mode="thread_local"):
        noise.uniform_()
    torch.cuda.manual_seed(7)
    want = torch.rand(64, device="cuda")
    torch.cuda.manual_seed(7)
    stream_before = torch.cuda.current_stream()
    g = TrainGraphs(net, requested=True, amp_dtype=None, reason=None, repeats=1)
    out = g.forward(x)  # capture fails, the step runs eager
    assert g.failed is not None and "capture failed" in g.failed
    assert torch.cuda.current_stream() == stream_before  # not left on the capture stream
    out.float().mean().backward()
    got = torch.rand(64, device="cuda")  # raised "Offset increment outside graph capture" before
    assert torch.equal(got, want)
    first = noise.clone()
    earlier.replay()
    torch.cuda.synchronize()
    assert not torch.equal(first, noise)  # replayed, and drew new numbers
    assert torch.isfinite(net.drop(torch.ones(8, device="cuda"))).all()
    # and a later, healthy capture in the same process still works
    ok = nn.Sequential(nn.Conv2d(3, 8, 3, padding=1), nn.BatchNorm2d(8)).cuda().train()
    g2 = TrainGraphs(ok, requested=True, amp_dtype=None, reason=None, repeats=1)
    g2.forward(x).float().mean().backward()
    assert g2.failed is None and g2.live


def test_trainer_really_replays_its_training_graph(tmp_path: Path) -> None:
    """cuda_graph=True through the trainer: the capture succeeds mid-epoch (with the previous step's
    autograd graph released) and later steps replay it; the result says so."""
    from libreyolo import LibreYOLO
    from libreyolo.data.shapes import ensure_shapes_dataset

    data = ensure_shapes_dataset(tmp_path / "ds", n_train=48, n_val=8, imgsz=160, seed=3)
    model = LibreYOLO("LibreYOLO9t.pt")
    out = model.train(data=str(data), epochs=2, batch=8, imgsz=160, workers=2, device="0", amp=True,
                      cuda_graph=True, project=str(tmp_path / "runs"), plots=False, tensorboard=False,
                      close_mosaic=0, val=False)
    info = out["cuda_graph"]
    assert info["failed"] is None, info["failed"]
    assert info["graphs"] and info["graphs"][0]["replays"] >= 6, info  # 12 steps: 3 eager, capture, replays


class _Stochastic(nn.Module):
    """Conv + dropout + a stochastic-depth style row mask: a forward that draws random numbers."""

    def __init__(self) -> None:
        super().__init__()
        self.conv = nn.Conv2d(3, 16, 3, padding=1)
        self.bn = nn.BatchNorm2d(16)
        self.drop = nn.Dropout(0.3)
        self.head = nn.Conv2d(16, 8, 1)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        y = self.drop(self.bn(self.conv(x)).relu())
        keep = (torch.rand(x.shape[0], 1, 1, 1, device=x.device) > 0.2).to(y.dtype)
        return self.head(y * keep)


def test_capture_restores_the_rng_so_the_first_replay_draws_the_eager_masks() -> None:
    """Warm-up iterations draw random numbers; the device RNG is restored after capture, so the
    replayed step zero equals an eager step from the same seed (dropout masks included), and the
    captured run's RNG stream then continues as the eager run's does."""
    dev = torch.device("cuda", 0)
    torch.manual_seed(0)
    base = _Stochastic().to(dev).train()
    x = torch.rand(4, 3, 32, 32, device=dev)
    eager_net, graph_net = copy.deepcopy(base), copy.deepcopy(base)

    def eager_steps(n: int) -> list[torch.Tensor]:
        torch.manual_seed(123)
        out = []
        for _ in range(n):
            y = eager_net(x)
            y.square().mean().backward()
            out.append(y.detach().clone())
        return out

    ref = eager_steps(2)
    g = TrainGraphs(graph_net, requested=True, amp_dtype=None, reason=None, repeats=1)
    torch.manual_seed(123)
    got = []
    for _ in range(2):
        y = g.forward(x)
        y.square().mean().backward()
        got.append(y.detach().clone())
    assert g.info()["graphs"] and g.info()["graphs"][0]["replays"] == 2, g.info()
    assert not torch.equal(ref[0], ref[1])  # the two steps drew different masks: the check is not vacuous
    for r, o in zip(ref, got, strict=True):
        assert torch.equal(r, o)
    for (k, pe), (_, pg) in zip(eager_net.named_parameters(), graph_net.named_parameters(), strict=True):
        assert torch.equal(pe.grad, pg.grad), k
