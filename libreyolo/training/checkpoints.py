"""Checkpoints of the trainer: what ``last.pt`` / ``best.pt`` hold, and resuming from them.

A mixin of :class:`libreyolo.training.trainer.Trainer`. ``last.pt`` is written every epoch with the
full training state (network, optimizer, EMA, scaler, schedule, counters) so that ``resume=True``
continues where the run stopped; ``best.pt`` holds the EMA weights and metrics only. Both go
through :func:`libreyolo.io.checkpoint.save_model` (temporary file, fsync, rename), so a kill
mid-save never leaves a corrupt file.
"""

from __future__ import annotations

import logging
import math
from pathlib import Path
from typing import TYPE_CHECKING, Any

from torch import Tensor, nn

from .config import TrainConfig, resolve_resume

if TYPE_CHECKING:
    import torch

    from ..models._base.family import Family
    from .ema import ModelEMA

logger = logging.getLogger(__name__)


class CheckpointMixin:
    """Saving and resuming (see the module docstring)."""

    model: Family
    cfg: TrainConfig
    explicit: set[str]
    net: nn.Module
    ema: ModelEMA | None
    optimizer: torch.optim.Optimizer
    scaler: torch.amp.GradScaler
    wdir: Path
    resume_path: Path | None
    start_epoch: int
    best_fitness: float
    best_metrics: dict[str, float]
    last_opt_step: int

    def _resume_checkpoint(self) -> dict[str, Any]:
        """Every rank reads the checkpoint (rank 0 alone writes them)."""
        self.resume_path, ckpt, self.cfg = resolve_resume(self.cfg, self.explicit)
        logger.info("resuming %s from epoch %d", self.resume_path, int(ckpt["train_state"]["epoch"]) + 2)
        return ckpt

    def _load_train_state(self, st: dict[str, Any]) -> None:
        self.optimizer.load_state_dict(st["optimizer"])
        if self.ema is not None and st.get("ema") is not None:
            self.ema.load_state_dict(st["ema"])
        if st.get("scaler"):
            self.scaler.load_state_dict(st["scaler"])
        self.start_epoch = int(st["epoch"]) + 1
        self.best_fitness = float(st.get("best_fitness", -math.inf))
        self.best_metrics = dict(st.get("best_metrics") or {})
        self.last_opt_step = int(st.get("last_opt_step", -1))

    def _weights(self) -> dict[str, Tensor]:
        return (self.ema.module if self.ema is not None else self.net).state_dict()

    def _save(self, epoch: int, metrics: dict[str, float], *, best: bool) -> None:
        from ..io.checkpoint import save_model

        common = {"train_args": self.cfg.to_dict(), "epoch": epoch, "metrics": dict(metrics)}
        state = {
            "epoch": epoch,
            "best_fitness": self.best_fitness,
            "best_metrics": dict(self.best_metrics),
            "net": {k: v.detach().cpu().clone() for k, v in self.net.state_dict().items()},
            "optimizer": self.optimizer.state_dict(),
            "ema": self.ema.state_dict() if self.ema is not None else None,
            "scaler": self.scaler.state_dict() if self.scaler.is_enabled() else {},
            "last_opt_step": self.last_opt_step,
            "schedule": {"epochs": self.cfg.epochs, "lrf": self.cfg.lrf, "cos": self.cfg.cos_lr},
        }
        weights = self._weights()
        save_model(self.model, self.wdir / "last.pt", state_dict=weights, extra={**common, "train_state": state})
        if best:
            save_model(self.model, self.wdir / "best.pt", state_dict=weights, extra=common)
