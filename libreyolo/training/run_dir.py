"""The run folder (``runs/<task>/<name>``): created by rank 0 at set-up, removed again when the
run stops before its first checkpoint, kept (with a resume hint) when it holds one."""

from __future__ import annotations

import logging
import shutil
from collections.abc import Callable
from pathlib import Path
from typing import Any

import yaml

from ..engine.validator import increment_dir  # one numbering rule for train and val runs
from .config import TrainConfig

logger = logging.getLogger(__name__)


def run_dir_for(cfg: TrainConfig, *, resume_path: Path | None) -> Path:
    """The run folder: a resumed run's own (``resume_path``: its ``weights/last.pt``), else the
    first free ``<project>/<name>[N]`` (``<project>/<name>`` itself with ``exist_ok``)."""
    if resume_path is not None:
        return resume_path.parent.parent
    return increment_dir(Path(cfg.project) / cfg.name, exist_ok=cfg.exist_ok)


def init_run_dir(save_dir: Path, cfg: TrainConfig) -> None:
    """Create ``save_dir/weights`` and write ``save_dir/args.yaml`` (the resolved config)."""
    (save_dir / "weights").mkdir(parents=True, exist_ok=True)
    (save_dir / "args.yaml").write_text(yaml.safe_dump(cfg.to_dict(), sort_keys=False))


def open_run_dir(cfg: TrainConfig, *, resume_path: Path | None, ddp: Any) -> tuple[Path, bool]:
    """(the run folder, whether this run created it): rank 0 alone finds and initialises it
    (:func:`run_dir_for`, :func:`init_run_dir`); ``ddp`` (:class:`~.distributed.Distributed`)
    tells the other ranks its name."""
    save_dir, created = None, False
    if ddp.is_main:
        save_dir = run_dir_for(cfg, resume_path=resume_path)
        created = resume_path is None and not save_dir.exists()
        init_run_dir(save_dir, cfg)
    return Path(ddp.broadcast(str(save_dir))), created


def after_failure(save_dir: Path, *, interrupted: bool, created: bool, saved_epochs: Callable[[], int],
                  release: Callable[[], None]) -> None:
    """A run that stops early: say how to resume when a checkpoint exists (``saved_epochs()``:
    epochs it holds); remove the folder this run ``created`` when it holds no checkpoint (nothing
    in it is worth keeping), after ``release()`` closed the files open in it."""
    last = save_dir / "weights" / "last.pt"
    if last.is_file():
        if interrupted:
            logger.warning("interrupted after epoch %d; resume with: libreyolo train resume=%s  "
                           "(Python: model.train(resume=%r))", saved_epochs(), last, str(last))
        return
    if created:
        release()
        shutil.rmtree(save_dir, ignore_errors=True)
        logger.info("removed %s: the run stopped before its first checkpoint", save_dir)
