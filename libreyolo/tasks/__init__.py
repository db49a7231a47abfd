"""Tasks: what one kind of output means, end to end.

A :class:`~libreyolo.tasks.base.Task` supplies what differs between, say, detection and
classification, so that the shared code (the predictor, the validator, the trainer's data
set-up) asks the task instead of branching on it: how a batch of images becomes the network
input, how raw outputs become the per-image values of :class:`~libreyolo.engine.results.Results`
(``boxes``, ``probs``, ``semantic``, ``depth``, ``points``, ``restored``, ``alpha``, or ``boxes`` with ``masks`` or ``keypoints``), how a
dataset is read, and how a split is scored.

A family names its tasks (``Family.TASKS``); a model's ``task`` picks the object here.

Example:
    >>> from libreyolo.tasks import get_task
    >>> get_task("classify").results_field
    'probs'
"""

from __future__ import annotations

from typing import Any

from ..errors import ConfigError
from .base import Task
from .classify import ClassifyTask
from .depth import DepthTask
from .detect import DetectTask
from .matte import MatteTask
from .ocr import OcrTask
from .point import PointTask
from .pose import PoseTask
from .prompt import PromptTask
from .restore import RestoreTask
from .segment import SegmentTask
from .semantic import SemanticTask

__all__ = ["Task", "get_task", "task_of", "TASKS"]

TASKS: dict[str, Task] = {t.name: t for t in (DetectTask(), ClassifyTask(), SemanticTask(), SegmentTask(), DepthTask(),
                                                PointTask(), RestoreTask(), PoseTask(), PromptTask(), MatteTask(),
                                                OcrTask())}


def get_task(name: str) -> Task:
    """The task object named ``name`` (``"detect"``, ``"classify"``, ``"semantic"``, ``"segment"``, ``"depth"``,
    ``"point"``, ``"restore"``, ``"pose"``, ``"prompt"``, ``"matte"``, ``"ocr"``)."""
    try:
        return TASKS[name]
    except KeyError:
        raise ConfigError(f"unknown task {name!r}; tasks: {', '.join(TASKS)}") from None


def task_of(model: Any) -> Task:
    """The task of a model, a family or an exported backend (its ``task`` attribute)."""
    return get_task(getattr(model, "task", "detect"))
