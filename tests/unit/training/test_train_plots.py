"""Training writes its pictures (plots=True) and logs validation losses to results.csv."""

from __future__ import annotations

import csv
import math
from pathlib import Path

import numpy as np
from matplotlib.image import imread

from libreyolo.model import Model
from libreyolo.models.yolo9.family import YOLO9

PICTURES = ("train_batch0.png", "train_batch1.png", "train_labels.png", "results.png", "confusion_matrix.png",
            "confusion_matrix_normalized.png", "PR_curve.png", "F1_curve.png", "P_curve.png", "R_curve.png",
            "val_batch0.png", "val_labels.png")


def _train(data: Path, project: Path, **kw):
    args = dict(data=str(data), imgsz=64, batch=4, workers=0, device="cpu", nbs=4, close_mosaic=0, warmup_epochs=0,
                optimizer="AdamW", lr0=0.002, verbose=False, tensorboard=False, project=str(project), seed=0,
                epochs=2)
    args.update(kw)
    return Path(Model(YOLO9(size="t", nc=6)).train(**args)["save_dir"])


def test_training_writes_pictures_and_validation_losses(tiny_shapes, tmp_path):
    run = _train(tiny_shapes, tmp_path)
    for name in PICTURES:
        img = imread(run / name)[..., :3]
        assert img.shape[0] >= 200 and img.shape[1] >= 300 and img.std() > 0.02, name
    with open(run / "results.csv", newline="") as f:
        rows = list(csv.DictReader(f))
    assert len(rows) == 2
    for name in ("box", "cls", "dfl"):  # YOLO9's LOSS_NAMES, next to the training losses
        assert f"train/{name}_loss" in rows[0]
        vals = [float(r[f"val/{name}_loss"]) for r in rows]
        assert all(math.isfinite(v) and v >= 0 for v in vals), (name, vals)
    assert float(rows[0]["val/cls_loss"]) > 0


def test_no_pictures_with_plots_false(tiny_shapes, tmp_path):
    run = _train(tiny_shapes, tmp_path, plots=False, epochs=1)
    assert not list(run.glob("*.png"))
    with open(run / "results.csv", newline="") as f:
        row = next(csv.DictReader(f))
    assert np.isfinite(float(row["val/box_loss"]))  # losses are logged whatever plots says
