"""The loop's optimiser step (:class:`libreyolo.training.optim.OptimizerStep`) and the background
checkpoint writer (:class:`libreyolo.training.checkpoints.BackgroundWriter`)."""

from __future__ import annotations

import copy
import threading

import pytest
import torch
from torch import nn

from libreyolo.training.checkpoints import BackgroundWriter, host_copy
from libreyolo.training.optim import OptimizerStep, build_optimizer, choose_optimizer


def _net() -> nn.Module:
    torch.manual_seed(0)
    net = nn.Sequential(nn.Conv2d(3, 8, 3), nn.BatchNorm2d(8), nn.SiLU(), nn.Conv2d(8, 8, 3), nn.Flatten(),
                        nn.LazyLinear(4))
    net(torch.rand(2, 3, 12, 12))  # materialise the lazy layer
    net[0].weight.requires_grad_(False)  # a frozen parameter: not in the optimiser, never clipped
    return net


@pytest.mark.parametrize("name", ["AdamW", "SGD"])
def test_step_equals_the_module_walking_sequence_bit_for_bit(name):
    """Same numbers as ``unscale -> clip_grad_norm_(net.parameters()) -> step -> update`` with the
    norm actually clipping (max_norm far below the gradient norm), over three steps, one of them
    with a parameter that has no gradient."""
    nets = [_net(), None]
    nets[1] = copy.deepcopy(nets[0])
    choice = choose_optimizer(name=name, lr0=0.05, momentum=0.9, nc=4, total_steps=3)
    opts = [build_optimizer(n, choice, weight_decay=5e-4) for n in nets]
    scalers = [torch.amp.GradScaler("cpu", enabled=False) for _ in nets]
    step = OptimizerStep(nets[0], opts[0], scalers[0], clip_grad=0.01)
    assert len(step.params) == sum(1 for p in nets[0].parameters() if p.requires_grad)
    x = torch.rand(2, 3, 12, 12)
    norms = []
    for it in range(3):
        for n, o in zip(nets, opts, strict=True):
            o.zero_grad(set_to_none=True)
            n(x).square().sum().backward()
            if it == 1:
                n[-1].bias.grad = None  # no gradient this step: both paths skip it
        norms.append(float(torch.nn.utils.get_total_norm([p.grad for p in nets[1].parameters()
                                                          if p.grad is not None])))
        step()
        scalers[1].unscale_(opts[1])
        torch.nn.utils.clip_grad_norm_(nets[1].parameters(), max_norm=0.01)
        scalers[1].step(opts[1])
        scalers[1].update()
    assert min(norms) > 0.01  # the clip was active
    for a, b in zip(nets[0].state_dict().values(), nets[1].state_dict().values(), strict=True):
        assert torch.equal(a, b)
    assert not torch.equal(nets[0][3].weight, _net()[3].weight)  # and the weights did move


def test_step_uses_the_scaler_it_holds_and_skips_non_finite_gradients():
    net = _net()
    opt = build_optimizer(net, choose_optimizer(name="SGD", lr0=0.1, momentum=0.9, nc=4, total_steps=1),
                          weight_decay=0.0)
    scaler = torch.amp.GradScaler("cpu", enabled=True, init_scale=2.0**4)
    step = OptimizerStep(net, opt, scaler, clip_grad=10.0)
    before = {k: v.clone() for k, v in net.named_parameters()}
    scaler.scale(net(torch.rand(2, 3, 12, 12)).sum() * float("inf")).backward()
    step()
    assert scaler.get_scale() < 2.0**4  # backed off
    for k, v in net.named_parameters():
        assert torch.equal(v, before[k]), k  # the step was skipped


def test_background_writer_runs_one_write_at_a_time_and_raises_its_error():
    w = BackgroundWriter()
    gate, order = threading.Event(), []

    def slow() -> None:
        gate.wait(5)
        order.append("first")

    w.submit(slow)
    gate.set()
    w.submit(lambda: order.append("second"))  # waits for the first write
    w.wait()
    assert order == ["first", "second"]

    def fail() -> None:
        raise OSError("disk full")

    w.submit(fail)
    with pytest.raises(OSError, match="disk full"):
        w.wait()
    w.wait()  # the error was raised once; nothing pending now
    w.submit(fail)
    with pytest.raises(OSError, match="disk full"):
        w.close()


def test_host_copy_detaches_from_the_live_tensors():
    live = {"state": {0: {"exp_avg": torch.zeros(3), "step": torch.tensor(1.0)}}, "groups": [{"lr": 0.1}]}
    snap = host_copy(live)
    live["state"][0]["exp_avg"].add_(1.0)
    assert torch.equal(snap["state"][0]["exp_avg"], torch.zeros(3))
    assert snap["groups"] == [{"lr": 0.1}]


def _fused(name: str, net: nn.Module) -> torch.optim.Optimizer:
    groups = [{"params": [p for n, p in net.named_parameters() if p.requires_grad and n.endswith("weight")],
               "weight_decay": 5e-4},
              {"params": [p for n, p in net.named_parameters() if p.requires_grad and n.endswith("bias")],
               "weight_decay": 0.0}]
    if name == "AdamW":
        return torch.optim.AdamW(groups, lr=0.01, betas=(0.9, 0.999), fused=True)
    return torch.optim.SGD(groups, lr=0.01, momentum=0.9, nesterov=True, fused=True)


@pytest.mark.parametrize("name", ["AdamW", "SGD"])
def test_lean_path_equals_torchs_fused_step_bit_for_bit(name):
    """Lean path (fused CPU kernels here, CUDA on a GPU) vs torch's own fused step through the
    GradScaler: six steps with an active clip, a scaler that grows every 2 steps, a non-finite
    step in the middle (skipped by both, scale backed off), and the state reloaded half-way
    (the lean path rebuilds its lists from the new state)."""
    nets = [_net(), None]
    nets[1] = copy.deepcopy(nets[0])
    opts = [_fused(name, n) for n in nets]
    scalers = [torch.amp.GradScaler("cpu", enabled=True, init_scale=2.0**8, growth_interval=2) for _ in nets]
    steps = [OptimizerStep(n, o, s, clip_grad=0.05) for n, o, s in zip(nets, opts, scalers, strict=True)]
    steps[1].kind = None  # the reference: torch's path only
    assert steps[0].kind == name.lower()
    x = torch.rand(2, 3, 12, 12)
    for it in range(6):
        if it == 3:  # a resume: new state objects, same values
            for o in opts:
                o.load_state_dict(copy.deepcopy(o.state_dict()))
        for n, o, s, st in zip(nets, opts, scalers, steps, strict=True):
            o.zero_grad(set_to_none=True)
            loss = n(x).square().sum() * (float("inf") if it == 2 else 1.0)
            s.scale(loss).backward()
            st()
        assert scalers[0].get_scale() == scalers[1].get_scale()
        for a, b in zip(nets[0].parameters(), nets[1].parameters(), strict=True):
            assert torch.equal(a, b), it
    assert steps[0].lean_steps == 5 and steps[1].lean_steps == 0  # all but the first (state creation)
    assert scalers[0].get_scale() != 2.0**8  # it backed off and grew
    sa, sb = opts[0].state_dict()["state"], opts[1].state_dict()["state"]
    for k in sa:
        for key, v in sa[k].items():
            assert torch.equal(v, sb[k][key]), (k, key)


def test_lean_path_steps_aside_for_a_missing_gradient_and_other_optimizers():
    net = _net()
    opt = _fused("AdamW", net)
    step = OptimizerStep(net, opt, torch.amp.GradScaler("cpu", enabled=False), clip_grad=0.0)
    for it in range(3):
        opt.zero_grad(set_to_none=True)
        net(torch.rand(2, 3, 12, 12)).sum().backward()
        if it == 2:
            net[-1].bias.grad = None
        step()
    assert step.lean_steps == 1  # step 0 creates the state, step 2 misses a gradient
    assert OptimizerStep(net, torch.optim.AdamW(net.parameters(), foreach=True), step.scaler, clip_grad=0).kind is None
    assert OptimizerStep(net, torch.optim.Adam(net.parameters(), fused=True), step.scaler, clip_grad=0).kind is None
