"""Training callbacks: events fire in order, with the documented arguments; bad events are refused."""

from __future__ import annotations

import csv
from pathlib import Path

import pytest

from libreyolo.errors import ConfigError
from libreyolo.model import Model
from libreyolo.models.yolo9.family import YOLO9
from libreyolo.training.callbacks import Callbacks
from libreyolo.training.trainer import Trainer


def _over(data: Path, project: Path, **kw) -> dict:
    base = dict(data=str(data), imgsz=64, batch=8, workers=0, device="cpu", nbs=8, mosaic=0.0, close_mosaic=0,
                warmup_epochs=0, optimizer="AdamW", lr0=0.002, verbose=False, tensorboard=False, plots=False,
                project=str(project), seed=0)
    return {**base, **kw}


def test_events_fire_in_order_with_their_arguments(tiny_shapes, tmp_path):
    seen: list[tuple[str, dict]] = []

    def record(event):
        def fn(trainer, info):
            assert isinstance(trainer, Trainer)
            seen.append((event, dict(info), trainer.epoch))
        return fn

    cbs = {e: record(e) for e in ("on_train_start", "on_train_epoch_end", "on_train_end")}
    cbs["on_fit_epoch_end"] = [record("on_fit_epoch_end"), record("fit_second")]  # a list: called in order
    result = Model(YOLO9(size="t", nc=6)).train(**_over(tiny_shapes, tmp_path, epochs=2), callbacks=cbs)

    assert [(e, ep) for e, _, ep in seen] == [
        ("on_train_start", 0), ("on_train_epoch_end", 0), ("on_fit_epoch_end", 0), ("fit_second", 0),
        ("on_train_epoch_end", 1), ("on_fit_epoch_end", 1), ("fit_second", 1), ("on_train_end", 1)]
    info = {e: [i for ev, i, _ in seen if ev == e] for e, _, _ in seen}
    assert info["on_train_start"][0]["epochs"] == 2 and info["on_train_start"][0]["imgsz"] == 64
    first = info["on_train_epoch_end"][0]
    assert first["epoch"] == 1 and {"train/box_loss", "train/cls_loss", "train/dfl_loss"} <= set(first)
    assert not any(k.startswith("metrics/") for k in first)  # before validation
    with open(Path(result["save_dir"]) / "results.csv", newline="") as f:
        rows = list(csv.DictReader(f))
    for got, row in zip(info["on_fit_epoch_end"], rows, strict=True):  # after validation: the results row
        assert "metrics/mAP50-95" in got and got["epoch"] == int(row["epoch"])
        assert got["metrics/mAP50"] == pytest.approx(float(row["metrics/mAP50"]))
        assert got["train/box_loss"] == pytest.approx(float(row["train/box_loss"]), rel=1e-4)
    assert info["on_fit_epoch_end"][0]["train/box_loss"] == pytest.approx(first["train/box_loss"])
    assert info["on_train_end"][0] == result


def test_bad_callbacks_are_refused(tiny_shapes, tmp_path):
    with pytest.raises(ConfigError, match="on_train_epoch_end"):  # the close match is suggested
        Model(YOLO9(size="t", nc=6)).train(**_over(tiny_shapes, tmp_path), callbacks={"on_train_epoch_ed": print})
    with pytest.raises(ConfigError, match="must be callable"):
        Callbacks({"on_train_end": "not a function"})
    with pytest.raises(ConfigError, match="multi-GPU launch"):
        Model(YOLO9(size="t", nc=6)).train(**_over(tiny_shapes, tmp_path, world_size=2), callbacks={"on_train_end": print})
    assert not (tmp_path / "train").exists()


def test_append_is_a_fit_epoch_end_callback():
    cbs = Callbacks()
    assert not cbs
    cbs.append(lambda trainer, row: None)  # the per-epoch hook benchmarks/bench_train.py uses
    assert cbs and len(cbs.by_event["on_fit_epoch_end"]) == 1
