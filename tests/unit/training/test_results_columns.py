"""The ``metrics/*`` columns of ``results.csv`` come from the task (``Task.metric_keys``); the
columns of every existing task are the ones the trainer wrote before the keys moved there."""

from __future__ import annotations

import pytest
import torch

from libreyolo.tasks import TASKS
from libreyolo.training.bookkeeping import epoch_row

# the list epoch_row held before the tasks owned their keys (the columns must not change)
OLD_KEYS = ("precision", "recall", "mAP50", "mAP50-95", "mask_mAP50", "mask_mAP50-95", "kpt_mAP50", "kpt_mAP50-95",
            "top1", "top5", "mIoU", "aAcc", "mAcc", "abs_rel", "rmse", "delta1", "psnr", "ssim")
EXPECTED = {
    "detect": ["precision", "recall", "mAP50", "mAP50-95"],
    "segment": ["precision", "recall", "mAP50", "mAP50-95", "mask_mAP50", "mask_mAP50-95"],
    "pose": ["precision", "recall", "mAP50", "mAP50-95", "kpt_mAP50", "kpt_mAP50-95"],
    "classify": ["top1", "top5"],
    "semantic": ["mIoU", "aAcc", "mAcc"],
    "depth": ["abs_rel", "rmse", "delta1"],
    "restore": ["psnr", "ssim"],
    "point": ["precision", "recall"],
    "prompt": [],
}


@pytest.mark.parametrize("task", sorted(EXPECTED))
def test_results_columns_are_unchanged(task: str) -> None:
    t = TASKS[task]
    metrics = t.scorer({0: "a"}).result(images=0, speed={}, ms_per_image=0.0, losses={}, save_dir=None)
    opt = torch.optim.SGD([torch.nn.Parameter(torch.zeros(1))], lr=0.01)
    row = epoch_row(epoch=0, names=("box",), losses=torch.zeros(1), metrics=metrics, optimizer=opt, train_s=1.0,
                    n_images=4, metric_keys=t.metric_keys)
    got = [k.removeprefix("metrics/") for k in row if k.startswith("metrics/")]
    assert got == EXPECTED[task] == [k for k in OLD_KEYS if k in metrics]
    assert list(row)[:2] == ["epoch", "train/box_loss"] and list(row)[-2:] == ["time/epoch_s", "time/images_per_s"]


def test_a_new_task_names_its_own_columns() -> None:
    from libreyolo.tasks.base import Task

    class Counting(Task):
        name = "count"
        metric_keys = ("mae",)

    opt = torch.optim.SGD([torch.nn.Parameter(torch.zeros(1))], lr=0.01)
    row = epoch_row(epoch=0, names=(), losses=torch.zeros(0), metrics={"mae": 1.5, "fitness": 0.2}, optimizer=opt,
                    train_s=1.0, n_images=1, metric_keys=Counting.metric_keys)
    assert row["metrics/mae"] == 1.5 and "metrics/fitness" not in row
    assert Task.metric_keys == ()


@pytest.mark.parametrize("task", sorted(TASKS))
def test_every_task_writes_the_metrics_its_scorer_reports(task: str) -> None:
    """A task added later (matte, ocr, ...) must name its metric columns, or results.csv would hold
    none of its validation metrics: every key is one the scorer reports, and only prompt has none."""
    t = TASKS[task]
    metrics = t.scorer({0: "a"}).result(images=0, speed={}, ms_per_image=0.0, losses={}, save_dir=None)
    assert all(k in metrics for k in t.metric_keys), (task, t.metric_keys, sorted(metrics))
    assert bool(t.metric_keys) == (task != "prompt"), task
