"""Optimiser groups, LR schedule with warm-up, EMA ramp, config parsing, results logger."""

from __future__ import annotations

import dataclasses
import math

import pytest
import torch
from torch import nn

from libreyolo.errors import ConfigError
from libreyolo.training.config import TrainConfig
from libreyolo.training.ema import ModelEMA
from libreyolo.training.loggers import ResultsLogger
from libreyolo.training.optim import build_optimizer, choose_optimizer, param_groups
from libreyolo.training.scheduler import LRSchedule


def _net():
    return nn.Sequential(nn.Conv2d(3, 4, 3, bias=False), nn.BatchNorm2d(4), nn.Conv2d(4, 2, 1))


def test_param_groups_no_decay_on_norm_and_bias():
    net = _net()
    decay, norm, bias = param_groups(net)
    assert [p.shape for p in decay] == [torch.Size([4, 3, 3, 3]), torch.Size([2, 4, 1, 1])]
    assert [p is net[1].weight for p in norm] == [True]
    assert {id(p) for p in bias} == {id(net[1].bias), id(net[2].bias)}
    opt = build_optimizer(net, choose_optimizer(name="SGD", lr0=0.01, momentum=0.937, nc=3, total_steps=10),
                          weight_decay=5e-4)
    assert isinstance(opt, torch.optim.SGD) and opt.defaults["nesterov"]
    assert [g["weight_decay"] for g in opt.param_groups] == [5e-4, 0.0, 0.0]
    assert [g["is_bias"] for g in opt.param_groups] == [False, False, True]


def test_auto_optimizer_choice():
    short = choose_optimizer(name="auto", lr0=0.01, momentum=0.937, nc=6, total_steps=500)
    assert short.name == "AdamW" and short.lr == pytest.approx(0.001)
    long = choose_optimizer(name="auto", lr0=0.01, momentum=0.937, nc=6, total_steps=50_000)
    assert long.name == "SGD" and long.lr == 0.01
    with pytest.raises(ConfigError):
        choose_optimizer(name="Adam", lr0=0.01, momentum=0.9, nc=1, total_steps=1)


def test_schedule_warmup_then_decay():
    net = _net()
    opt = build_optimizer(net, choose_optimizer(name="SGD", lr0=0.01, momentum=0.937, nc=3, total_steps=10),
                          weight_decay=0.0)
    s = LRSchedule(epochs=10, lrf=0.01, cos=False, warmup_iters=10, warmup_bias_lr=0.1, warmup_momentum=0.8,
                   momentum=0.937)
    s.apply(opt, iteration=0, epoch=0)
    assert opt.param_groups[0]["lr"] == 0.0 and opt.param_groups[2]["lr"] == pytest.approx(0.1)
    assert opt.param_groups[0]["momentum"] == pytest.approx(0.8)
    s.apply(opt, iteration=5, epoch=0)
    assert opt.param_groups[0]["lr"] == pytest.approx(0.005) and opt.param_groups[2]["lr"] == pytest.approx(0.055)
    s.apply(opt, iteration=10, epoch=5)
    assert all(g["lr"] == pytest.approx(0.01 * (0.5 * 0.99 + 0.01)) for g in opt.param_groups)
    assert s.factor(10) == pytest.approx(0.01)
    cos = LRSchedule(epochs=10, lrf=0.01, cos=True, warmup_iters=0, warmup_bias_lr=0.1, warmup_momentum=0.8,
                     momentum=0.937)
    assert cos.factor(0) == 1.0 and cos.factor(5) == pytest.approx(0.505) and cos.factor(10) == pytest.approx(0.01)


def test_ema_ramp_and_average():
    net = nn.Linear(2, 1)
    with torch.no_grad():
        net.weight.zero_()
    ema = ModelEMA(net, decay=0.9, tau=1.0)
    with torch.no_grad():
        net.weight.fill_(1.0)
    ema.update(net)
    d = 0.9 * (1 - math.exp(-1))
    assert ema.module.weight[0, 0].item() == pytest.approx(1 - d)
    assert not any(p.requires_grad for p in ema.module.parameters())
    state = ema.state_dict()
    other = ModelEMA(nn.Linear(2, 1))
    other.load_state_dict(state)
    assert other.updates == 1 and torch.equal(other.module.weight, ema.module.weight)


def test_config_coercion_and_errors():
    cfg = TrainConfig.from_overrides({"epochs": "3", "amp": "false", "lr0": "0.02", "resume": "true", "device": 0})
    assert (cfg.epochs, cfg.amp, cfg.lr0, cfg.resume, cfg.device) == (3, False, 0.02, True, "0")
    with pytest.raises(ConfigError, match="optimizer"):
        TrainConfig.from_overrides({"optimizer": "adam"})
    with pytest.raises(ConfigError, match="epochs"):
        TrainConfig.from_overrides({"epochs": 0})
    # a size off the stride grid is rounded up with one notice (as predict does), not refused
    assert TrainConfig.from_overrides({"imgsz": 33}).imgsz == 64
    assert TrainConfig.from_overrides({"imgsz": 100}).imgsz == 128
    assert TrainConfig.from_overrides({"imgsz": 5}).imgsz == 32
    with pytest.raises(ConfigError, match="imgsz"):
        TrainConfig.from_overrides({"imgsz": 0})
    with pytest.raises(ConfigError, match="multiple of 32"):
        TrainConfig(imgsz=100)._check()  # a config built directly is checked, not rounded
    with pytest.raises(ConfigError, match="wrong type"):
        TrainConfig.from_overrides({"batch": "eight"})
    with pytest.raises(dataclasses.FrozenInstanceError):
        cfg.epochs = 5  # type: ignore[misc]


def test_results_logger_csv_png_and_resume(tmp_path):
    log = ResultsLogger(tmp_path, tensorboard=False)
    for e in (1, 2, 3):
        log.log({"epoch": e, "train/box_loss": 1.0 / e, "metrics/mAP50": 0.1 * e})
    log.close()
    lines = (tmp_path / "results.csv").read_text().splitlines()
    assert lines[0] == "epoch,train/box_loss,metrics/mAP50" and len(lines) == 4
    assert (tmp_path / "results.png").stat().st_size > 1000
    again = ResultsLogger(tmp_path, tensorboard=False, start_epoch=1)  # resuming at epoch index 1
    again.log({"epoch": 2, "train/box_loss": 0.4, "metrics/mAP50": 0.3})
    lines = (tmp_path / "results.csv").read_text().splitlines()
    assert [ln.split(",")[0] for ln in lines[1:]] == ["1", "2"] and lines[2].endswith("0.3")


def test_time_limit_replan_shrinks_schedule_and_stops():
    from libreyolo.training.trainer import Trainer

    t = Trainer(object(), TrainConfig.from_overrides({"epochs": 100, "time_limit": 100.0}))
    t.schedule = LRSchedule(epochs=100, lrf=0.01, cos=False, warmup_iters=0, warmup_bias_lr=0.1,
                            warmup_momentum=0.8, momentum=0.937)
    assert t._replan(0, elapsed=15.0, last_epoch_s=15.0) and t.cfg.epochs == 100  # first epoch: no re-plan
    assert t._replan(1, elapsed=25.0, last_epoch_s=10.0)
    assert t.cfg.epochs == 2 + 7 and t.schedule.epochs == 9  # 75 s left / 10 s per epoch
    assert not t._replan(7, elapsed=95.0, last_epoch_s=10.0)  # the next epoch would overrun


def test_family_recipe_defaults_sit_under_user_keys(caplog) -> None:
    import logging

    from libreyolo.training.trainer import with_family_defaults

    class Fam:
        FAMILY = "demo"
        TRAIN_DEFAULTS = {"optimizer": "AdamW", "amp": False, "lr0": 1e-4}

    with caplog.at_level(logging.INFO, logger="libreyolo.training"):
        got = with_family_defaults(Fam(), {"data": "x.yaml", "lr0": 0.01})
    assert got == {"optimizer": "AdamW", "amp": False, "lr0": 0.01, "data": "x.yaml"}
    assert sum("recipe defaults" in r.getMessage() for r in caplog.records) == 1
    assert with_family_defaults(Fam(), {"resume": True}) == {"resume": True}  # saved args win on resume

    class Plain:
        FAMILY = "plain"
        TRAIN_DEFAULTS: dict = {}

    assert with_family_defaults(Plain(), {"epochs": 3}) == {"epochs": 3}


@pytest.mark.parametrize("weights, exempt", [
    ("LibreSwint-cls.pt", {"table"}),  # window attention's relative-position bias tables
    ("LibreViTs16-cls.pt", {"cls_token", "pos_embed"}),
    ("LibreDINOv2s14-cls.pt", {"cls_token", "pos_embed"}),
])
def test_transformer_position_parameters_train_without_weight_decay(weights, exempt):
    """The ViT / DeiT / Swin recipes exempt position embeddings, the class token and relative
    position tables from weight decay: they land in the undecayed group, every other matrix in
    the decayed one."""
    from libreyolo import LibreYOLO
    from libreyolo.training.optim import param_groups

    net = LibreYOLO(weights, pretrained=False, nc=3).net
    decay, norm, _ = param_groups(net)
    names = {id(p): n.rsplit(".", 1)[-1] for n, p in net.named_parameters()}
    undecayed = {names[id(p)] for p in norm}
    assert exempt <= undecayed
    assert not exempt & {names[id(p)] for p in decay}
    assert all(p.ndim >= 2 for p in decay) and len(decay) > 10
