"""Training options: save_period, patience (its default and early stop), their validation."""

from __future__ import annotations

from pathlib import Path

import pytest

from libreyolo.errors import ConfigError
from libreyolo.io.checkpoint import read_checkpoint
from libreyolo.models.yolo9.family import YOLO9
from libreyolo.training.config import TrainConfig
from libreyolo.training.trainer import Trainer


def _over(data: Path, project: Path, **kw) -> dict:
    base = dict(data=str(data), imgsz=64, batch=8, workers=0, device="cpu", nbs=8, mosaic=0.0, close_mosaic=0,
                warmup_epochs=0, optimizer="AdamW", lr0=0.002, verbose=False, tensorboard=False, plots=False,
                project=str(project), seed=0)
    return {**base, **kw}


def test_save_period_writes_resumable_epoch_checkpoints(tiny_shapes, tmp_path):
    result = YOLO9(size="t", nc=6).train(**_over(tiny_shapes, tmp_path, epochs=3, val=False, save_period=2))
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
    result = YOLO9(size="t", nc=6).train(**_over(tiny_shapes, tmp_path, epochs=5, patience=2))
    assert result["epochs"] == 3  # epoch 1 sets the best, epochs 2 and 3 do not improve
    last = read_checkpoint(Path(result["last"]))
    assert last["train_state"]["epoch"] == 2  # stopped early: last.pt stays resumable
