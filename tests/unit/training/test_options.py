"""Training options: save_period, patience (its default and early stop), their validation."""

from __future__ import annotations

from pathlib import Path

import pytest

from libreyolo.errors import ConfigError
from libreyolo.io.checkpoint import read_checkpoint
from libreyolo.model import Model
from libreyolo.models.yolo9.family import YOLO9
from libreyolo.training.config import TrainConfig
from libreyolo.training.trainer import Trainer


def _over(data: Path, project: Path, **kw) -> dict:
    base = dict(data=str(data), imgsz=64, batch=8, workers=0, device="cpu", nbs=8, mosaic=0.0, close_mosaic=0,
                warmup_epochs=0, optimizer="AdamW", lr0=0.002, verbose=False, tensorboard=False, plots=False,
                project=str(project), seed=0)
    return {**base, **kw}


def test_save_period_writes_resumable_epoch_checkpoints(tiny_shapes, tmp_path):
    result = Model(YOLO9(size="t", nc=6)).train(**_over(tiny_shapes, tmp_path, epochs=3, val=False, save_period=2))
    wdir = Path(result["save_dir"]) / "weights"
    assert sorted(p.name for p in wdir.iterdir()) == ["best.pt", "epoch2.pt", "last.pt"]
    assert read_checkpoint(wdir / "epoch2.pt")["train_state"]["epoch"] == 1  # 1-based name, resumable


def test_save_period_off_by_default_and_validated():
    assert TrainConfig().save_period == -1
    for bad in (0, -2):
        with pytest.raises(ConfigError, match="save_period must be >= 1"):
            TrainConfig.from_overrides({"save_period": bad})


def test_patience_defaults_to_100_and_stops_early(tiny_shapes, tmp_path, monkeypatch):
    assert TrainConfig().patience == 100
    with pytest.raises(ConfigError, match="patience"):
        TrainConfig.from_overrides({"patience": -1})
    flat = {"fitness": 0.5, "mAP50": 0.5, "mAP50-95": 0.5, "precision": 0.5, "recall": 0.5}
    monkeypatch.setattr(Trainer, "_validate", lambda self, *, final: dict(flat))  # never improves after epoch 1
    result = Model(YOLO9(size="t", nc=6)).train(**_over(tiny_shapes, tmp_path, epochs=5, patience=2))
    assert result["epochs"] == 3  # epoch 1 sets the best, epochs 2 and 3 do not improve
    last = read_checkpoint(Path(result["last"]))
    assert last["train_state"]["epoch"] == 2  # stopped early: last.pt stays resumable


def _setup(data: Path, project: Path, model=None, **kw) -> Trainer:
    t = Trainer(model or Model(YOLO9(size="t", nc=6)), TrainConfig.from_overrides(_over(data, project, epochs=1, **kw)),
                explicit=set(kw))
    t.setup()
    return t


def test_single_cls_collapses_labels_and_builds_a_one_class_head(tiny_shapes, tmp_path):
    t = _setup(tiny_shapes, tmp_path)
    try:
        assert len({int(c) for a in t.data.train_ds.labels for c in a[:, 0]}) > 1  # the data has several classes
    finally:
        t.teardown()
    model = Model(YOLO9(size="t", nc=6))
    t = Trainer(model, TrainConfig.from_overrides(_over(tiny_shapes, tmp_path, epochs=1, single_cls=True)))
    result = t.fit()  # trains and validates with one class
    assert model.nc == model.net.nc == 1 and model.names == {0: "object"}
    for ds in (t.data.train_ds, t.data.val_ds):
        assert sum(len(a) for a in ds.labels) > 0 and all((a[:, 0] == 0).all() for a in ds.labels)
    assert read_checkpoint(Path(result["best"]))["libreyolo"]["nc"] == 1


def test_fraction_keeps_the_first_sorted_images(tiny_shapes, tmp_path):
    t = _setup(tiny_shapes, tmp_path, fraction=0.5)
    try:
        assert t.data.train_ds.im_files == [str(f) for f in t.data.config.train[:4]] and len(t.data.config.train) == 8
        assert len(t.data.val_ds) == 4  # validation keeps every image
    finally:
        t.teardown()
    for bad in (0, 1.5):
        with pytest.raises(ConfigError, match=r"fraction must be in \(0, 1\]"):
            TrainConfig.from_overrides({"fraction": bad})


def test_freeze_first_modules_keeps_them_fixed_and_out_of_the_optimizer(tiny_shapes, tmp_path, caplog):
    import logging

    import torch

    with caplog.at_level(logging.INFO, logger="libreyolo.training"):
        t = _setup(tiny_shapes, tmp_path, freeze=2)
    try:
        frozen = [p for n, p in t.net.named_parameters() if n.split(".")[0] in ("stem1", "stem2")]
        assert frozen and not any(p.requires_grad for p in frozen)
        assert all(p.requires_grad for n, p in t.net.named_parameters() if n.startswith("p2."))
        in_opt = {id(p) for g in t.optimizer.param_groups for p in g["params"]}
        assert not any(id(p) in in_opt for p in frozen)
        n = sum(p.numel() for p in frozen)
        assert any(f"{n:,} of" in r.getMessage() and "frozen" in r.getMessage() for r in caplog.records)
        before = [p.detach().clone() for p in frozen]
        trained = [p.detach().clone() for n_, p in t.net.named_parameters() if n_.startswith("p2.")]
        t._loop()
        assert all(torch.equal(a, p) for a, p in zip(before, frozen, strict=True))
        after = [p for n_, p in t.net.named_parameters() if n_.startswith("p2.")]
        assert any(not torch.equal(a, p) for a, p in zip(trained, after, strict=True))
    finally:
        t.teardown()


def test_freeze_by_name_prefix_and_bad_specs(tiny_shapes, tmp_path):
    t = _setup(tiny_shapes, tmp_path, freeze=["head.cls", "stem1"])
    try:
        names = {n for n, p in t.net.named_parameters() if not p.requires_grad}
        assert names and all(n.startswith(("head.cls.", "stem1.")) for n in names)
        assert any(n.startswith("head.cls.") for n in names) and any(n.startswith("stem1.") for n in names)
        assert all(p.requires_grad for n, p in t.net.named_parameters() if n.startswith("head.box."))
    finally:
        t.teardown()
    with pytest.raises(ConfigError, match="no module named 'backbone'"):
        _setup(tiny_shapes, tmp_path, freeze="backbone")
    with pytest.raises(ConfigError, match="only 18 top-level modules"):
        _setup(tiny_shapes, tmp_path, freeze=99)
    with pytest.raises(ConfigError, match="freeze must be"):
        TrainConfig.from_overrides({"freeze": -1})


def test_results_csv_times_validation_and_checkpointing(tiny_shapes, tmp_path):
    """Every epoch row says how long training, validation and checkpoint writing took."""
    import csv

    out = Model(YOLO9(size="t", nc=6)).train(**_over(tiny_shapes, tmp_path, epochs=2))
    with open(Path(out["save_dir"]) / "results.csv", newline="") as f:
        rows = list(csv.DictReader(f))
    assert len(rows) == 2
    for r in rows:
        assert float(r["time/epoch_s"]) > 0 and float(r["time/val_s"]) > 0 and float(r["time/save_s"]) > 0


def test_cfg_file_supplies_keys_that_direct_keys_override(tiny_shapes, tmp_path):
    import yaml

    cfg = tmp_path / "run.yaml"
    cfg.write_text(yaml.safe_dump({"epochs": 2, "imgsz": 64, "seed": 3, "val": False}))
    base = _over(tiny_shapes, tmp_path)
    del base["imgsz"], base["seed"]
    out = Model(YOLO9(size="t", nc=6)).train(**base, cfg=str(cfg), epochs=1)  # epochs given directly wins
    args = yaml.safe_load((Path(out["save_dir"]) / "args.yaml").read_text())
    assert args["epochs"] == 1 and args["seed"] == 3 and args["imgsz"] == 64 and args["cfg"] == str(cfg)
    bad = tmp_path / "bad.yaml"
    bad.write_text("epochz: 3\n")
    with pytest.raises(ConfigError, match=r"epochz.*bad\.yaml|bad\.yaml.*epochz"):
        Model(YOLO9(size="t", nc=6)).train(**base, cfg=str(bad))
    with pytest.raises(ConfigError, match="no such file"):
        Model(YOLO9(size="t", nc=6)).train(**base, cfg=str(tmp_path / "missing.yaml"))
    (tmp_path / "list.yaml").write_text("- 1\n- 2\n")
    with pytest.raises(ConfigError, match="must be a mapping"):
        Model(YOLO9(size="t", nc=6)).train(**base, cfg=str(tmp_path / "list.yaml"))


def test_cfg_file_for_val(tmp_path):
    from libreyolo import LibreYOLO

    cfg = tmp_path / "val.yaml"
    cfg.write_text("imgsz: 64\nbatch: 4\nworkers: 0\ndevice: cpu\nverbose: false\nplots: false\n")
    model = LibreYOLO("LibreYOLO9t.pt")
    a = model.val(cfg=str(cfg), data="shapes")
    b = model.val(data="shapes", imgsz=64, batch=4, workers=0, device="cpu", verbose=False, plots=False)
    assert a["mAP50-95"] == b["mAP50-95"]


class _Recorder:
    """A stand-in for the mlflow / wandb modules that records what the trainer calls."""

    def __init__(self) -> None:
        self.calls: list[tuple[str, tuple, dict]] = []

    def __getattr__(self, name):
        if name.startswith("__"):
            raise AttributeError(name)

        def call(*a, **k):
            self.calls.append((name, a, k))
            if name == "active_run":
                return None
            if name == "init":
                return self  # the wandb run object: log / save / finish land here too
            return None

        return call

    def named(self, name):
        return [(a, k) for n, a, k in self.calls if n == name]


def test_mlflow_and_wandb_get_params_metrics_and_files(tiny_shapes, tmp_path, monkeypatch):
    import sys

    mlflow, wandb = _Recorder(), _Recorder()
    monkeypatch.setitem(sys.modules, "mlflow", mlflow)
    monkeypatch.setitem(sys.modules, "wandb", wandb)
    monkeypatch.delenv("WANDB_PROJECT", raising=False)
    out = Model(YOLO9(size="t", nc=6)).train(**_over(tiny_shapes, tmp_path, epochs=2, mlflow=True, wandb=True, name="exp"))
    (params,), _ = mlflow.named("log_params")[0]
    assert params["epochs"] == 2 and params["name"] == "exp" and params["nbs"] == 8
    steps = [k["step"] for _, k in mlflow.named("log_metrics")]
    assert steps == [1, 2] and "metrics/mAP50-95" in mlflow.named("log_metrics")[0][0][0]
    logged = {Path(a[0]).name for a, _ in mlflow.named("log_artifact")}
    assert {"results.csv", "best.pt", "last.pt"} <= logged
    assert [n for n, _, _ in mlflow.calls].count("end_run") == 1 and mlflow.named("start_run")[0][1]["run_name"] == "exp"
    (_, init), = wandb.named("init")
    assert init["name"] == "exp" and init["config"]["epochs"] == 2 and init["dir"] == str(out["save_dir"])
    assert [k["step"] for _, k in wandb.named("log")] == [1, 2] and len(wandb.named("finish")) == 1
    assert {Path(a[0]).name for a, _ in wandb.named("save")} >= {"results.csv", "best.pt"}


def test_missing_mlflow_is_a_warning_not_an_error(tiny_shapes, tmp_path, monkeypatch, caplog):
    import logging
    import sys

    monkeypatch.setitem(sys.modules, "mlflow", None)
    with caplog.at_level(logging.WARNING):
        out = Model(YOLO9(size="t", nc=6)).train(**_over(tiny_shapes, tmp_path, epochs=1, val=False, mlflow=True))
    assert (Path(out["save_dir"]) / "weights" / "last.pt").is_file()
    assert any("mlflow=True but mlflow is not installed" in r.getMessage() for r in caplog.records)


def test_train_with_ram_cache(tiny_shapes, tmp_path):
    out = Model(YOLO9(size="t", nc=6)).train(**_over(tiny_shapes, tmp_path, epochs=1, val=False, cache="ram"))
    assert (Path(out["save_dir"]) / "weights" / "last.pt").is_file()
    with pytest.raises(ConfigError, match="cache must be"):
        Model(YOLO9(size="t", nc=6)).train(**_over(tiny_shapes, tmp_path, epochs=1, val=False, cache="disk"))
