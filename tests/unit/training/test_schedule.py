"""The warm-up / accumulation schedule as a pure function, the optimizer implementation choice and
the cached foreach EMA update."""

from __future__ import annotations

import math

import pytest
import torch
from torch import nn

from libreyolo.training.ema import ModelEMA
from libreyolo.training.optim import build_optimizer, choose_optimizer, step_impl
from libreyolo.training.scheduler import LRSchedule, count_optimizer_steps, warmup_iterations


def _schedule(**kw) -> LRSchedule:
    base = dict(epochs=10, lrf=0.01, cos=False, warmup_iters=100, warmup_bias_lr=0.1, warmup_momentum=0.8,
                momentum=0.937, accumulate=4, nominal_accumulate=4.0)
    base.update(kw)
    return LRSchedule(**base)


def _net() -> nn.Module:
    return nn.Sequential(nn.Conv2d(3, 4, 3, bias=False), nn.BatchNorm2d(4), nn.Conv2d(4, 2, 1))


@pytest.mark.parametrize(("warmup_epochs", "nb", "epochs", "want"), [
    (3, 20, 15, 100),    # 60 iterations -> the 100-iteration floor (the 320-image setting)
    (3, 20, 45, 100),
    (3, 100, 50, 300),   # longer than the floor: warmup_epochs decides
    (3, 4, 3, 6),        # 12-iteration run: capped at half the run, so it ends warm-up
    (3, 1, 1, 1),        # never below one iteration while warm-up is on
    (0, 20, 15, 0),      # warmup_epochs=0 turns it off
    (0.5, 400, 10, 200),
])
def test_warmup_length(warmup_epochs, nb, epochs, want):
    assert warmup_iterations(warmup_epochs=warmup_epochs, iters_per_epoch=nb, epochs=epochs) == want


def test_accumulation_ramps_from_one_to_nominal_during_warmup():
    s = _schedule(warmup_iters=100, accumulate=4, nominal_accumulate=4.0)
    acc = [s.accumulate_at(i) for i in range(130)]
    assert acc[0] == 1 and acc[99] == 4 and set(acc[100:]) == {4}
    assert all(a <= b for a, b in zip(acc, acc[1:], strict=False))  # never shrinks
    assert {1, 2, 3, 4} <= set(acc[:100])  # passes through every value in between
    # batch >= nbs: no accumulation at any point
    flat = _schedule(accumulate=1, nominal_accumulate=1.0)
    assert {flat.accumulate_at(i) for i in range(200)} == {1}
    # no warm-up: the full accumulation from the first iteration
    assert _schedule(warmup_iters=0).accumulate_at(0) == 4


def test_warmup_lr_and_momentum_sgd():
    net = _net()
    opt = build_optimizer(net, choose_optimizer(name="SGD", lr0=0.01, momentum=0.937, nc=3, total_steps=10),
                          weight_decay=0.0)
    s = _schedule(warmup_iters=10)
    s.apply(opt, iteration=0, epoch=0)
    lrs = [g["lr"] for g in opt.param_groups]
    assert lrs[0] == lrs[1] == 0.0 and lrs[2] == pytest.approx(0.1)  # bias group starts high, others at 0
    assert all(g["momentum"] == pytest.approx(0.8) for g in opt.param_groups)
    s.apply(opt, iteration=5, epoch=0)
    assert opt.param_groups[0]["lr"] == pytest.approx(0.005) and opt.param_groups[2]["lr"] == pytest.approx(0.055)
    assert opt.param_groups[0]["momentum"] == pytest.approx(0.8 + 0.137 / 2)
    s.apply(opt, iteration=10, epoch=1)
    assert all(g["lr"] == pytest.approx(0.01 * s.factor(1)) and g["momentum"] == 0.937 for g in opt.param_groups)


def test_warmup_adamw_keeps_betas_and_uses_the_given_bias_start():
    net = _net()
    opt = build_optimizer(net, choose_optimizer(name="AdamW", lr0=0.001, momentum=0.9, nc=3, total_steps=10),
                          weight_decay=0.0)
    _schedule(warmup_iters=10, warmup_bias_lr=0.0).apply(opt, iteration=0, epoch=0)
    assert [g["lr"] for g in opt.param_groups] == [0.0, 0.0, 0.0]
    assert all(g["betas"] == (0.9, 0.999) for g in opt.param_groups)
    _schedule(warmup_iters=10, warmup_bias_lr=0.05).apply(opt, iteration=0, epoch=0)
    assert opt.param_groups[2]["lr"] == pytest.approx(0.05)


def _simulate_steps(s: LRSchedule, nb: int, epochs: int) -> list[int]:
    """The trainer's rule written out: step on a full window or on an epoch's last batch."""
    steps, last = [], -1
    for epoch in range(epochs):
        for i in range(nb):
            ni = epoch * nb + i
            if i == nb - 1 or ni - last >= s.accumulate_at(ni):
                steps.append(ni)
                last = ni
        last = nb * (epoch + 1) - 1
    return steps


@pytest.mark.parametrize(("nb", "epochs", "warm", "acc"), [(4, 3, 6, 32), (20, 15, 100, 4), (7, 5, 0, 3),
                                                           (300, 4, 100, 4), (3, 2, 3, 1)])
def test_count_optimizer_steps_matches_the_loop_rule(nb, epochs, warm, acc):
    s = _schedule(epochs=epochs, warmup_iters=warm, accumulate=acc, nominal_accumulate=float(acc))
    steps = _simulate_steps(s, nb, epochs)
    assert count_optimizer_steps(s, iters_per_epoch=nb, epochs=epochs) == len(steps)
    assert count_optimizer_steps(s, iters_per_epoch=nb, epochs=epochs, start_epoch=1) == sum(
        n >= nb for n in steps)
    ends = {nb * (e + 1) - 1 for e in range(epochs)}
    assert ends <= set(steps)  # every epoch ends with a step: no window spans two epochs


def test_small_run_still_steps_every_epoch():
    """19.1: 8 images, batch 2, nbs 64, 3 epochs never filled one 32-batch window before."""
    nb, epochs = 4, 3
    s = _schedule(epochs=epochs, warmup_iters=warmup_iterations(warmup_epochs=3, iters_per_epoch=nb, epochs=epochs),
                  accumulate=32, nominal_accumulate=32.0)
    assert count_optimizer_steps(s, iters_per_epoch=nb, epochs=epochs) >= 3
    assert count_optimizer_steps(_schedule(epochs=epochs, warmup_iters=0, accumulate=32, nominal_accumulate=32.0),
                                 iters_per_epoch=nb, epochs=epochs) == 3


def test_step_implementation_choice():
    assert step_impl(torch.device("cuda")) == {"fused": True}
    assert step_impl(torch.device("cpu")) == {"foreach": True} == step_impl(None)
    for name in ("SGD", "AdamW"):
        opt = build_optimizer(_net(), choose_optimizer(name=name, lr0=0.01, momentum=0.9, nc=3, total_steps=10),
                              weight_decay=0.0, device=torch.device("cpu"))
        assert opt.defaults["foreach"] is True


def test_ema_foreach_update_matches_the_formula_without_state_dict_walks(monkeypatch):
    torch.manual_seed(0)
    net = _net()
    ema = ModelEMA(net, decay=0.9, tau=2.0)
    start = {k: v.clone() for k, v in ema.module.state_dict().items()}
    ema.update(net)  # the network still equals the EMA copy: nothing moves; the tensor lists are cached
    assert all(torch.equal(v, start[k]) for k, v in ema.module.state_dict().items())
    with torch.no_grad():
        for p in net.parameters():
            p.add_(torch.randn_like(p))
        net[1].running_mean.add_(1.0)
        net[1].running_var.mul_(2.0)
        net[1].num_batches_tracked.add_(5)
    calls = []
    monkeypatch.setattr(type(net), "state_dict", lambda *a, **k: calls.append(1) or {})
    ema.update(net)
    monkeypatch.undo()
    assert calls == []  # no state_dict() walk per step
    d = 0.9 * (1 - math.exp(-2 / 2.0))
    assert ema.updates == 2 and ema.current_decay() == pytest.approx(d)
    sd, got = net.state_dict(), ema.module.state_dict()
    assert got["1.num_batches_tracked"].item() == 5  # integer buffer copied
    for k, v in got.items():
        if v.dtype.is_floating_point:
            assert not torch.equal(v, start[k]), k
            assert torch.allclose(v, start[k] + (sd[k] - start[k]) * (1 - d), atol=1e-6), k


@pytest.mark.parametrize(("optimizer", "nbs", "want_acc"), [
    ("auto", None, 1),          # a short run: auto picks AdamW, which steps on every batch
    ("AdamW", None, 1),
    ("AdamW", 64, 4),           # nbs given: accumulate to it under AdamW too
    ("SGD", None, 4),           # SGD accumulates to 64 images per step by default
    ("SGD", 32, 2),
])
def test_plan_accumulates_for_sgd_only_and_keeps_decay_per_epoch(optimizer, nbs, want_acc):
    from libreyolo.training.config import TrainConfig
    from libreyolo.training.plan import nominal_batch, plan_steps

    cfg = TrainConfig(optimizer=optimizer, nbs=nbs)
    net = nn.Sequential(nn.Conv2d(3, 4, 3), nn.BatchNorm2d(4), nn.Conv2d(4, 2, 1))
    plan = plan_steps(cfg, net=net, nc=3, batch=16, world_size=1, nb=20, explicit={"optimizer", "nbs"},
                      device=torch.device("cpu"), train_state=None, warn=False)
    assert plan.accumulate == want_acc
    assert plan.schedule.accumulate_at(0) == 1 and plan.schedule.accumulate_at(10_000) == want_acc
    decay = plan.optimizer.param_groups[0]["weight_decay"]
    assert decay == pytest.approx(cfg.weight_decay * 16 * want_acc / nominal_batch(cfg))
    # steps counted for the run are those of the chosen accumulation (every epoch ends with a step)
    assert plan.total_steps == count_optimizer_steps(plan.schedule, iters_per_epoch=20, epochs=cfg.epochs)
    if want_acc == 1:
        assert plan.total_steps == 20 * cfg.epochs
    assert plan.schedule.warmup_bias_lr == cfg.warmup_bias_lr == 0.1  # biases warm down from 0.1 under AdamW too


def test_bias_warmup_start_scales_with_a_shortened_adamw_warmup():
    from libreyolo.training.config import TrainConfig
    from libreyolo.training.plan import bias_warmup_start

    cfg = TrainConfig()
    assert bias_warmup_start(cfg, optimizer="AdamW", warmup_iters=200) == 0.1
    assert bias_warmup_start(cfg, optimizer="AdamW", warmup_iters=50) == pytest.approx(0.05)
    assert bias_warmup_start(cfg, optimizer="SGD", warmup_iters=12) == 0.1  # SGD: as given
    assert bias_warmup_start(TrainConfig(warmup_bias_lr=0.0), optimizer="AdamW", warmup_iters=100) == 0.0


def test_detr_families_keep_their_reference_bias_warmup_of_zero():
    """A 0.1 bias lr is 400-1000x the DETR recipes' AdamW lr: those families opt out."""
    from libreyolo.registry import families

    seen = 0
    for fam in families().values():
        d = getattr(fam, "TRAIN_DEFAULTS", {})
        if d.get("optimizer") == "AdamW":
            seen += 1
            assert d.get("warmup_bias_lr") == 0.0, fam.FAMILY
    assert seen >= 4  # rtdetr, rtdetrv2, dfine, deim
