"""End-to-end training on a tiny shapes subset: outputs, loss decrease, resume, atomic checkpoints."""

from __future__ import annotations

import csv
import logging
import os
from pathlib import Path

import pytest
import torch

from libreyolo.errors import CheckpointError, ConfigError
from libreyolo.io.checkpoint import read_checkpoint
from libreyolo.model import Model
from libreyolo.models.yolo9.family import YOLO9
from libreyolo.training.config import TrainConfig
from libreyolo.training.trainer import Trainer


def tiny_overrides(data, project, **kw):
    base = dict(data=str(data), imgsz=64, batch=4, workers=0, device="cpu", nbs=4, mosaic=0.0, close_mosaic=0,
                warmup_epochs=0, optimizer="AdamW", lr0=0.002, verbose=False, tensorboard=False,
                project=str(project), seed=0)
    base.update(kw)
    return base


def _rows(run: Path) -> list[dict[str, str]]:
    with open(run / "results.csv", newline="") as f:
        return list(csv.DictReader(f))


def _train_loss(row: dict[str, str]) -> float:
    return sum(float(v) for k, v in row.items() if k.startswith("train/"))


@pytest.fixture(scope="module")
def trained(tiny_shapes, tmp_path_factory):
    project = tmp_path_factory.mktemp("runs")
    model = Model(YOLO9(size="t", nc=80))  # the dataset has fewer classes: the head is rebuilt
    result = model.train(**tiny_overrides(tiny_shapes, project, epochs=3))
    return model, result, Path(result["save_dir"])


def test_end_to_end_writes_every_output(trained):
    model, result, run = trained
    for rel in ("weights/last.pt", "weights/best.pt", "results.csv", "results.png", "args.yaml"):
        assert (run / rel).is_file(), rel
    rows = _rows(run)
    assert [r["epoch"] for r in rows] == ["1", "2", "3"]
    assert {"train/box_loss", "train/cls_loss", "train/dfl_loss", "metrics/mAP50-95", "metrics/mAP50",
            "metrics/precision", "metrics/recall", "lr/pg0"} <= set(rows[0])
    for key in ("mAP50-95", "mAP50", "precision", "recall", "fitness", "save_dir"):
        assert key in result
    assert result["save_dir"] == str(run) and run.name == "train"
    assert not list((run / "weights").glob("*.tmp"))


def test_loss_decreases(trained):
    rows = _rows(trained[2])
    assert _train_loss(rows[-1]) < 0.8 * _train_loss(rows[0])


def test_model_holds_best_ema_weights_and_new_head(trained):
    model, result, run = trained
    ckpt = read_checkpoint(run / "weights" / "best.pt")
    assert model.nc == ckpt["libreyolo"]["nc"] == 6 and model.net.nc == 6
    sd = model.net.state_dict()
    assert all(torch.equal(sd[k], v) for k, v in ckpt["model"].items())
    assert "train_state" not in ckpt
    assert not model.net.training


def test_finished_run_strips_last_pt(trained):
    """All epochs ran: last.pt holds the final weights, args and metrics, no optimizer/EMA/RNG state."""
    _, _, run = trained
    last = read_checkpoint(run / "weights" / "last.pt")
    assert "train_state" not in last and last["epoch"] == 2 and last["train_args"]["epochs"] == 3
    assert set(last["model"]) == set(read_checkpoint(run / "weights" / "best.pt")["model"])


def test_second_run_increments_name(trained, tiny_shapes):
    _, _, run = trained
    t = Trainer(Model(YOLO9(size="t", nc=6)), TrainConfig.from_overrides(tiny_overrides(tiny_shapes, run.parent, epochs=1)))
    t.setup()
    t.teardown()
    assert t.save_dir == run.parent / "train2"


def _interrupt_at(monkeypatch, epoch_to_fail: int, exc: BaseException) -> None:
    original = Trainer._train_epoch

    def wrapped(self, epoch):
        if epoch == epoch_to_fail:
            raise exc
        return original(self, epoch)

    monkeypatch.setattr(Trainer, "_train_epoch", wrapped)


def test_resume_continues_with_identical_state(tiny_shapes, tmp_path, monkeypatch):
    over = tiny_overrides(tiny_shapes, tmp_path, epochs=2, val=False, batch=8, nbs=8)  # 1 step per epoch
    with monkeypatch.context() as m:
        _interrupt_at(m, 1, KeyboardInterrupt())
        with pytest.raises(KeyboardInterrupt):
            Model(YOLO9(size="t", nc=6)).train(**over)
    last = tmp_path / "train" / "weights" / "last.pt"
    saved = read_checkpoint(last)
    assert saved["train_state"]["epoch"] == 0  # interrupted: last.pt stays resumable
    interrupted_size = last.stat().st_size

    t = Trainer(Model(YOLO9(size="t", nc=6)), TrainConfig.from_overrides({"resume": True, "project": str(tmp_path)}),
                explicit={"resume", "project"})
    t.setup()
    try:
        assert t.start_epoch == 1 and t.save_dir == tmp_path / "train" and t.cfg.epochs == 2
        got, want = t.optimizer.state_dict(), saved["train_state"]["optimizer"]
        assert got["param_groups"] == want["param_groups"]
        for k, st in want["state"].items():
            for name, v in st.items():
                assert torch.equal(torch.as_tensor(got["state"][k][name]).cpu(), torch.as_tensor(v)), (k, name)
        assert t.ema.updates == saved["train_state"]["ema"]["updates"] > 0
        net_sd = t.net.state_dict()
        assert all(torch.equal(net_sd[k], v) for k, v in saved["train_state"]["net"].items())
    finally:
        t.teardown()

    result = Model(YOLO9(size="t", nc=6)).train(resume=str(last))
    assert result["epochs"] == 2 and result["save_dir"] == str(tmp_path / "train")
    assert [r["epoch"] for r in _rows(tmp_path / "train")] == ["1", "2"]
    finished = read_checkpoint(last)  # the resumed run finished: stripped, and nothing is left to resume
    assert "train_state" not in finished and finished["epoch"] == 1
    assert last.stat().st_size < 0.7 * interrupted_size
    with pytest.raises(CheckpointError, match="finished all its epochs"):
        Model(YOLO9(size="t", nc=6)).train(resume=str(last))


def test_crash_between_write_and_rename_keeps_old_last_pt(tiny_shapes, tmp_path, monkeypatch):
    from libreyolo.training import trainer as trainer_mod

    original_save = Trainer._save

    def crashing_save(self, epoch, metrics, *, best):
        if epoch == 1:
            self.checkpointer.wait()  # epoch 0's background write is on disk; epoch 1's rename fails

            def boom(src, dst):
                raise OSError("simulated crash before rename")

            monkeypatch.setattr(os, "replace", boom)
        return original_save(self, epoch, metrics, best=best)

    monkeypatch.setattr(trainer_mod.Trainer, "_save", crashing_save)
    with pytest.raises((OSError, CheckpointError), match="simulated crash"):  # io may wrap the OSError
        Model(YOLO9(size="t", nc=6)).train(**tiny_overrides(tiny_shapes, tmp_path, epochs=2, val=False, batch=8, nbs=8))
    monkeypatch.undo()
    wdir = tmp_path / "train" / "weights"
    ckpt = read_checkpoint(wdir / "last.pt")  # intact and loadable
    assert ckpt["train_state"]["epoch"] == 0
    assert sorted(p.name for p in wdir.iterdir()) == ["best.pt", "last.pt"]  # no temp file left


def test_unknown_key_suggests_and_fused_model_refuses(tiny_shapes, tmp_path):
    with pytest.raises(ConfigError, match="Did you mean 'epochs'"):
        Model(YOLO9(size="t", nc=6)).train(epoch=3)
    with pytest.raises(ConfigError, match="Did you mean 'weight_decay'"):
        TrainConfig.from_overrides({"weight_decy": 0.1})
    model = Model(YOLO9(size="t", nc=6)).fuse()
    with pytest.raises(ConfigError, match="fused"):
        model.train(**tiny_overrides(tiny_shapes, tmp_path, epochs=1))
    assert not (tmp_path / "train").exists()


def test_cuda_graph_flag_is_safe_on_cpu(tiny_shapes, tmp_path, caplog):
    t = Trainer(Model(YOLO9(size="t", nc=6)),
                TrainConfig.from_overrides(tiny_overrides(tiny_shapes, tmp_path, epochs=1, cuda_graph=True)))
    with caplog.at_level(logging.INFO):
        t.setup()
    t.teardown()
    assert t.capture.graphs is None
    assert sum("training eager" in r.message for r in caplog.records) == 1


def test_result_reports_why_cuda_graph_did_not_run(tiny_shapes, tmp_path):
    out = Model(YOLO9(size="t", nc=6)).train(**tiny_overrides(tiny_shapes, tmp_path, epochs=1, cuda_graph=True, val=False))
    info = out["cuda_graph"]
    assert info["enabled"] is False and "cpu" in info["reason"] and info["graphs"] == []
    assert "cuda_graph" not in Model(YOLO9(size="t", nc=6)).train(
        **tiny_overrides(tiny_shapes, tmp_path, epochs=1, val=False, name="plain"))


def test_close_mosaic_calls_family_hook(tiny_shapes, tmp_path):
    calls = []

    class Hooked(YOLO9):
        def on_close_mosaic(self, criterion):
            calls.append(criterion)

    t = Trainer(Hooked(size="t", nc=6), TrainConfig.from_overrides(
        tiny_overrides(tiny_shapes, tmp_path, epochs=2, close_mosaic=1, mosaic=1.0, val=False, batch=8, nbs=8)))
    t.fit()
    assert len(calls) == 1 and calls[0] is t.criterion
    assert not t.train_ds.mosaic_enabled


def test_no_autograd_graph_outlives_its_step(tiny_shapes, tmp_path):
    """A training capture in step k fails while step k-1's autograd graph is alive (its
    AccumulateGrad nodes sit on another stream): the loop must release each step's predictions
    and loss before the next forward. A probe in the capture's place checks that on the CPU."""
    import weakref

    t = Trainer(Model(YOLO9(size="t", nc=6)), TrainConfig.from_overrides(tiny_overrides(tiny_shapes, tmp_path, epochs=1)))
    t.setup()
    previous: list[weakref.ref] = []
    calls = []

    class Probe:
        def forward(self, imgs):
            assert all(r() is None for r in previous), "the previous step's predictions or loss are still alive"
            out = t.capture.eager(imgs)
            previous[:] = [weakref.ref(p) for p in out]
            calls.append(imgs.shape[0])
            return out

        def zero_grad(self, optimizer):
            optimizer.zero_grad(set_to_none=True)

    criterion = t.criterion

    def tracked(preds, batch):
        loss, items = criterion(preds, batch)
        previous.append(weakref.ref(loss))
        return loss, items

    t.capture.graphs = Probe()
    t.criterion = tracked
    try:
        t._train_epoch(0)
    finally:
        t.teardown()
    assert len(calls) >= 2


@pytest.mark.parametrize("scaler", [False, True], ids=["host-check", "grad-scaler"])
def test_non_finite_batches_are_skipped_and_left_out_of_the_means(tiny_shapes, tmp_path, monkeypatch, caplog,
                                                                  scaler):
    """Batches with a non-finite loss: skipped on the host (no scaler) or by the gradient scaler
    (AMP path, exercised here with a CPU scaler); the epoch means cover the finite batches only,
    one warning per newly skipped stretch, and the weights stay finite."""
    import libreyolo.training.trainer as trainer_module

    monkeypatch.setattr(trainer_module, "REFRESH_EVERY", 3)
    t = Trainer(Model(YOLO9(size="t", nc=6)), TrainConfig.from_overrides(
        tiny_overrides(tiny_shapes, tmp_path, epochs=1, batch=1, nbs=1, val=False)))
    t.setup()
    if scaler:
        t.scaler = torch.amp.GradScaler("cpu", enabled=True, init_scale=1.0)
        t.opt_step.scaler = t.scaler  # the step uses the trainer's scaler
    criterion, calls, good, bad = t.criterion, [], [], {2, 5}

    def poisoned(preds, batch):
        loss, items = criterion(preds, batch)
        k = len(calls)
        calls.append(k)
        if k in bad:  # an infinite term whose gradient is finite: the loss alone is non-finite
            return loss + float("inf"), items + float("inf")
        good.append(items.clone())
        return loss, items

    t.criterion = poisoned
    try:
        with caplog.at_level(logging.WARNING):
            mloss = t._train_epoch(0)
    finally:
        t.teardown()
    assert len(calls) == t.nb > max(bad)
    assert torch.allclose(mloss, torch.stack(good).mean(0))
    assert all(torch.isfinite(v).all() for v in t.net.state_dict().values() if v.is_floating_point())
    warned = [r.getMessage() for r in caplog.records if "non-finite" in r.getMessage()]
    assert len(warned) == 2, warned  # one per skipped batch: they fall in different refresh stretches
    if scaler:
        assert t.scaler.get_scale() < 1.0  # the scaler saw the non-finite gradients and backed off
