"""The training recipe end to end on the CPU: small runs step every epoch, the default recipe
converges, a resumed run reproduces the uninterrupted one bit for bit, failed runs leave no empty
folder, resume refuses keys it cannot honour."""

from __future__ import annotations

import csv
import logging
from pathlib import Path

import pytest
import torch

from libreyolo.errors import ConfigError
from libreyolo.io.checkpoint import read_checkpoint
from libreyolo.model import Model
from libreyolo.models.yolo9.family import YOLO9
from libreyolo.training.config import TrainConfig
from libreyolo.training.scheduler import count_optimizer_steps
from libreyolo.training.trainer import Trainer


def over(data, project, **kw):
    base = dict(data=str(data), imgsz=64, batch=2, workers=0, device="cpu", mosaic=0.0, close_mosaic=0,
                verbose=False, tensorboard=False, plots=False, project=str(project), seed=0, val=False)
    base.update(kw)
    return base


def _model(seed: int = 0) -> YOLO9:
    torch.manual_seed(seed)  # the untrained weights are drawn before train() seeds anything
    return Model(YOLO9(size="t", nc=6))


def _losses(run: Path) -> list[float]:
    with open(run / "results.csv", newline="") as f:
        return [sum(float(v) for k, v in r.items() if k.startswith("train/")) for r in csv.DictReader(f)]


def test_small_run_steps_every_epoch_and_warns_once(tiny_shapes, tmp_path, caplog):
    """19.1: 8 images, batch 2, nbs=64 given (AdamW accumulates only then), 3 epochs: the 32-batch
    window is never full, yet the optimizer steps (ramped accumulation + the partial window at every
    epoch end)."""
    t = Trainer(_model(), TrainConfig.from_overrides(over(tiny_shapes, tmp_path, epochs=3, nbs=64)))
    positions: list[tuple[int, int]] = []
    original = Trainer._optimizer_step

    def counted(self):
        positions.append((self.epoch, self.optimizer.state_dict()["state"].__len__()))
        return original(self)

    start = {k: v.clone() for k, v in t.model.net.state_dict().items()}
    with caplog.at_level(logging.WARNING), pytest.MonkeyPatch.context() as m:
        m.setattr(Trainer, "_optimizer_step", counted)
        t.fit()
    assert t.accumulate == 32 and t.nb == 4
    want = count_optimizer_steps(t.schedule, iters_per_epoch=t.nb, epochs=3)
    assert len(positions) == want >= 3 and t.ema.updates == want
    assert {e for e, _ in positions} == {0, 1, 2}  # every epoch stepped
    warned = [r.getMessage() for r in caplog.records if "optimizer step" in r.getMessage()]
    assert len(warned) == 1 and f"only {want} optimizer steps" in warned[0] and "nbs 64" in warned[0]
    best = read_checkpoint(Path(t.save_dir) / "weights" / "best.pt")["model"]
    assert any(not torch.equal(best[k], start[k]) for k in start if start[k].is_floating_point())


def test_default_recipe_converges(tiny_shapes, tmp_path):
    """The default schedule (auto optimizer stepping on every batch, 3-epoch / 100-iteration
    warm-up capped at half the run, bias warm-up start scaled to it) must keep the loss going down
    on a fixed tiny set. The full bias lr of 0.1 over this 12-iteration warm-up, for one, makes the
    loss climb from 0.21 to 1.5."""
    result = _model().train(**over(tiny_shapes, tmp_path, epochs=12, batch=4, translate=0.0, scale=0.0,
                                   fliplr=0.0, hsv_h=0.0, hsv_s=0.0, hsv_v=0.0))
    losses = _losses(Path(result["save_dir"]))
    assert len(losses) == 12
    first, last = sum(losses[:3]) / 3, sum(losses[-3:]) / 3
    assert last < 0.95 * first, losses
    assert sum(losses[6:]) < sum(losses[:6]), losses
    assert max(losses[6:]) < losses[0], losses


def _state(last: Path) -> dict:
    return read_checkpoint(last)["train_state"]


def _assert_same_state(a: dict, b: dict) -> None:
    for k, v in a["net"].items():
        assert torch.equal(v, b["net"][k]), k
    for k, v in a["ema"]["module"].items():
        assert torch.equal(v, b["ema"]["module"][k]), k
    assert a["ema"]["updates"] == b["ema"]["updates"] and a["last_opt_step"] == b["last_opt_step"]
    oa, ob = a["optimizer"], b["optimizer"]
    assert oa["param_groups"] == ob["param_groups"]
    for i, st in oa["state"].items():
        for name, v in st.items():
            assert torch.equal(torch.as_tensor(v), torch.as_tensor(ob["state"][i][name])), (i, name)


def _kill_in_epoch(monkeypatch, epoch: int) -> None:
    """KeyboardInterrupt in the middle of ``epoch``, right after its first optimizer step."""
    original = Trainer._optimizer_step

    def stepping(self):
        original(self)
        if self.epoch == epoch:
            raise KeyboardInterrupt

    monkeypatch.setattr(Trainer, "_optimizer_step", stepping)


def test_resume_reproduces_the_uninterrupted_run_bit_for_bit(tiny_shapes, tmp_path, monkeypatch, caplog):
    """Kill mid-epoch at two points (epoch 2 and epoch 3 of 3), resume each, and compare every
    weight, EMA tensor and optimizer state with an uninterrupted run. Accumulation 2 with a
    ramped warm-up, so windows and the partial-window rule are part of what must match."""
    kw = dict(epochs=3, nbs=4, warmup_epochs=1.0, optimizer="AdamW", lr0=0.002)
    monkeypatch.setattr(Trainer, "_strip_last", lambda self: None)  # compare the final training states
    ref = _model().train(**over(tiny_shapes, tmp_path, name="ref", **kw))
    want = _state(Path(ref["last"]))
    assert want["ema"]["updates"] >= 6  # at least two steps per epoch: the kills land mid-epoch
    for name, kill_in in (("a", 1), ("b", 2)):
        with monkeypatch.context() as m:
            _kill_in_epoch(m, kill_in)
            with caplog.at_level(logging.WARNING), pytest.raises(KeyboardInterrupt):
                _model().train(**over(tiny_shapes, tmp_path, name=name, **kw))
        last = tmp_path / name / "weights" / "last.pt"
        hint = [r.getMessage() for r in caplog.records if "resume with" in r.getMessage()]
        assert hint and f"resume={last}" in hint[-1]
        stale = last.parent / ".last.pt.4999999.x1y2z3.tmp"  # an interrupted write of a dead process
        stale.write_bytes(b"\0" * 64)
        _model(seed=123).train(resume=str(last))  # other initial weights: the checkpoint must decide
        assert not stale.exists()
        _assert_same_state(want, _state(last))
        assert _losses(tmp_path / name) == _losses(tmp_path / "ref")


def test_resume_extends_epochs_and_refuses_other_changes(tiny_shapes, tmp_path, monkeypatch):
    kw = dict(nbs=4, warmup_epochs=0.0, optimizer="AdamW", lr0=0.002)
    monkeypatch.setattr(Trainer, "_strip_last", lambda self: None)  # as a last.pt that kept its state
    ref = _model().train(**over(tiny_shapes, tmp_path, name="ref", epochs=2, **kw))
    short = _model().train(**over(tiny_shapes, tmp_path, name="short", epochs=1, **kw))
    last = Path(short["last"])
    with pytest.raises(ConfigError, match=r"lr0=0\.1 cannot change on resume"):
        _model().train(resume=str(last), lr0=0.1, epochs=2)
    with pytest.raises(ConfigError, match="already finished"):
        _model().train(resume=str(last))
    out = _model().train(resume=str(last), epochs=2, lr0=0.002)  # the saved value again is fine
    assert out["epochs"] == 2 and read_checkpoint(last)["train_args"]["epochs"] == 2
    _assert_same_state(_state(Path(ref["last"])), _state(last))
    with pytest.raises(ConfigError, match="epochs=1 on resume"):
        _model().train(resume=str(last), epochs=1)


@pytest.mark.parametrize("exc", [RuntimeError("boom"), KeyboardInterrupt()], ids=["error", "ctrl-c"])
def test_failed_run_leaves_no_empty_folder(tiny_shapes, tmp_path, monkeypatch, caplog, exc):
    def failing(self, epoch):
        raise exc

    monkeypatch.setattr(Trainer, "_train_epoch", failing)
    with caplog.at_level(logging.INFO), pytest.raises(type(exc)):
        _model().train(**over(tiny_shapes, tmp_path, epochs=2))
    assert not (tmp_path / "train").exists()
    assert not any("resume with" in r.getMessage() for r in caplog.records)  # nothing to resume from


def test_one_epoch_messages(tiny_shapes, tmp_path, caplog):
    with caplog.at_level(logging.INFO):
        _model().train(**over(tiny_shapes, tmp_path, epochs=1, mosaic=1.0, close_mosaic=10, imgsz=33))
    text = "\n".join(r.getMessage() for r in caplog.records)
    assert "1 epochs" not in text and "last 10 epochs" not in text
    assert "mosaic off for the whole run" in text and ": 1 epoch from 1" in text
    assert "training at imgsz=64" in text


def test_partial_window_gradient_is_the_sum_of_its_micro_batches(tiny_shapes, tmp_path):
    """4 batches per epoch, windows of 3 (nbs 6, batch 2, no warm-up): the optimizer sees the sum of
    micro-batches 0-2, then micro-batch 3 alone (the partial window: not rescaled, not carried into
    the next epoch). The step is replaced by a recorder so the weights stay fixed and every
    micro-batch's gradient can be recomputed on its own afterwards."""
    t = Trainer(_model(), TrainConfig.from_overrides(over(tiny_shapes, tmp_path, epochs=1, nbs=6, warmup_epochs=0.0,
                                                          fliplr=0.0, hsv_h=0.0, hsv_s=0.0, hsv_v=0.0, scale=0.0,
                                                          translate=0.0)))
    t.setup()
    seen: list[tuple[torch.Tensor, dict]] = []
    windows: list[list[torch.Tensor]] = []
    criterion = t.criterion

    def recording(preds, batch):
        seen.append(batch)
        return criterion(preds, batch)

    def record_step():
        windows.append([p.grad.detach().clone() for p in t.net.parameters()])
        t._zero_grad()

    t.criterion = recording
    t._optimizer_step = record_step
    try:
        t._train_epoch(0)
        assert t.nb == 4 and t.accumulate == 3 and len(windows) == 2

        def grads(batch) -> list[torch.Tensor]:
            t.net.zero_grad(set_to_none=True)
            imgs = batch["img"].float().div_(255.0)
            loss, _ = criterion(t.capture.eager(imgs), batch)
            loss.backward()
            return [p.grad.detach().clone() for p in t.net.parameters()]

        per_batch = [grads(b) for b in seen]
    finally:
        t.teardown()
    full = [sum(gs) for gs in zip(*per_batch[:3], strict=True)]
    for got, want in zip(windows[0], full, strict=True):
        assert torch.allclose(got, want, rtol=1e-4, atol=1e-6)
    for got, want in zip(windows[1], per_batch[3], strict=True):
        assert torch.allclose(got, want, rtol=1e-4, atol=1e-6)
    assert any(g.abs().sum() > 0 for g in windows[1])


def test_workers_capped_at_the_usable_cores(tiny_shapes, tmp_path, monkeypatch, caplog):
    import os

    monkeypatch.setattr(os, "sched_getaffinity", lambda pid: {0, 1}, raising=False)
    from libreyolo.training.data_setup import DataSetup

    def data_setup(**kw) -> DataSetup:
        cfg = TrainConfig.from_overrides(over(tiny_shapes, tmp_path, epochs=1, **kw))
        return DataSetup(_model(), cfg, device=torch.device("cpu"), dist=None)

    with caplog.at_level(logging.INFO):
        assert data_setup(workers=8).workers() == 2
    assert any("workers=8 capped at 2" in r.getMessage() for r in caplog.records)
    assert data_setup(workers=1).workers() == 1
