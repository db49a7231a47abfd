"""Checkpoints of the trainer: what ``last.pt`` / ``best.pt`` hold, and resuming from them.

A mixin of :class:`libreyolo.training.trainer.Trainer`. ``last.pt`` is written every epoch with the
full training state (network, optimizer, EMA, scaler, schedule, counters) so that ``resume=True``
continues where the run stopped; a run that trains all its epochs strips it to the final weights,
args and metrics at the end. ``best.pt`` holds the EMA weights and metrics only. Both go through
:func:`libreyolo.io.checkpoint.save_model` (temporary file, fsync, rename), so a kill mid-save
never leaves a corrupt file; the temporary files a kill leaves behind (``.last.pt.*.tmp``) are
removed at the start of the next save or resume. With ``save_period=N``, ``epoch<N>.pt`` (1-based,
as in ``results.csv``) is a resumable copy of ``last.pt`` every N epochs (copied, then renamed).

Resume reproduces the uninterrupted run exactly (bit for bit on the CPU) at epoch boundaries,
because an epoch boundary is a clean cut: every epoch ends with an optimizer step (no gradient is
carried into the next epoch), the sampler and the augmentation are functions of
``(seed, epoch, index)``, and ``last.pt`` holds everything else the next epoch reads: network,
optimizer, EMA (with its update count), gradient scaler, the optimizer-step counter, the early-stop
counter and the Python, NumPy, torch (CPU and CUDA) and loader-generator random states.
"""

from __future__ import annotations

import contextlib
import logging
import math
import random
import shutil
import time
from collections.abc import Iterator
from pathlib import Path
from typing import TYPE_CHECKING, Any

import numpy as np
import torch
from torch import Tensor, nn

from .config import TrainConfig, resolve_resume

if TYPE_CHECKING:
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
        remove_stale_tmp(self.resume_path.parent)
        logger.info("resuming %s from epoch %d of %d", self.resume_path, int(ckpt["train_state"]["epoch"]) + 2,
                    self.cfg.epochs)
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
        self.stale = int(st.get("stale", 0))
        self._saved_rng = st.get("rng")  # restored by _restore_rng() at the end of setup

    def _restore_rng(self) -> None:
        """Put back the random states saved with the epoch (after everything setup draws)."""
        rng = getattr(self, "_saved_rng", None)
        if not rng:
            return
        self._saved_rng = None
        gen = getattr(getattr(self, "train_loader", None), "generator", None)
        if gen is not None and rng.get("loader") is not None:
            gen.set_state(rng["loader"])
        if getattr(self, "dist", None) is not None:  # rank 0's global streams are not the other ranks':
            return  # under DDP every rank keeps its own seed + rank streams (the loop draws nothing from them)
        random.setstate((rng["python"][0], tuple(rng["python"][1]), rng["python"][2]))
        np.random.set_state(("MT19937", rng["numpy"]["key"].numpy().astype(np.uint32), int(rng["numpy"]["pos"]),
                             int(rng["numpy"]["has_gauss"]), float(rng["numpy"]["cached_gaussian"])))
        torch.set_rng_state(rng["torch"])
        device = getattr(self, "device", None)
        if isinstance(rng.get("cuda"), torch.Tensor) and device is not None and device.type == "cuda":
            torch.cuda.set_rng_state(rng["cuda"], device)

    def _weights(self) -> dict[str, Tensor]:
        return (self.ema.module if self.ema is not None else self.net).state_dict()

    def _common(self, epoch: int, metrics: dict[str, float]) -> dict[str, Any]:
        return {"train_args": self.cfg.to_dict(), "epoch": epoch, "metrics": dict(metrics)}

    def _strip_last(self) -> None:
        """A run that trained all its epochs: ``last.pt`` is rewritten with the final weights, args and
        metrics but no ``train_state`` (optimizer, EMA, RNG: most of its size), like ``best.pt``. A run
        stopped early (interrupt, error, ``time_limit``, ``patience``) keeps it resumable."""
        from ..io.checkpoint import save_model

        save_model(self.model, self.wdir / "last.pt", state_dict=self._weights(),
                   extra=self._common(self.epoch, getattr(self, "last_metrics", {})))

    @contextlib.contextmanager
    def timed(self, stage: str) -> Iterator[None]:
        """Record the wall seconds of a per-epoch stage as ``time/<stage>_s`` in
        :attr:`stage_seconds` (logged to ``results.csv`` with the epoch's row)."""
        t0 = time.perf_counter()
        try:
            yield
        finally:
            self.__dict__.setdefault("stage_seconds", {})[f"time/{stage}_s"] = time.perf_counter() - t0

    @property
    def stage_seconds(self) -> dict[str, float]:
        return self.__dict__.get("stage_seconds", {})

    def _save(self, epoch: int, metrics: dict[str, float], *, best: bool) -> None:
        with self.timed("save"):
            self._write_checkpoints(epoch, metrics, best=best)

    def _write_checkpoints(self, epoch: int, metrics: dict[str, float], *, best: bool) -> None:
        from ..io.checkpoint import save_model

        common = self._common(epoch, metrics)
        state = {
            "epoch": epoch,
            "best_fitness": self.best_fitness,
            "best_metrics": dict(self.best_metrics),
            "net": {k: v.detach().cpu().clone() for k, v in self.net.state_dict().items()},
            "optimizer": self.optimizer.state_dict(),
            "ema": self.ema.state_dict() if self.ema is not None else None,
            "scaler": self.scaler.state_dict() if self.scaler.is_enabled() else {},
            "last_opt_step": self.last_opt_step,
            "stale": int(getattr(self, "stale", 0)),
            "rng": rng_state(getattr(getattr(self, "train_loader", None), "generator", None),
                             device=getattr(self, "device", None)),
            "schedule": {"epochs": self.cfg.epochs, "lrf": self.cfg.lrf, "cos": self.cfg.cos_lr},
        }
        weights = self._weights()
        remove_stale_tmp(self.wdir)  # the writer also does this per file where io.checkpoint supports it
        save_model(self.model, self.wdir / "last.pt", state_dict=weights, extra={**common, "train_state": state})
        if best:
            save_model(self.model, self.wdir / "best.pt", state_dict=weights, extra=common)
        if self.cfg.save_period > 0 and (epoch + 1) % self.cfg.save_period == 0:  # a resumable copy of last.pt
            tmp = self.wdir / f".epoch{epoch + 1}.pt.copy"
            shutil.copyfile(self.wdir / "last.pt", tmp)
            tmp.replace(self.wdir / f"epoch{epoch + 1}.pt")
        self.saved_epochs = epoch + 1


def rng_state(loader_generator: torch.Generator | None = None, *,
              device: torch.device | None = None) -> dict[str, Any]:
    """Python, NumPy, torch (CPU, and the training ``device`` when it is a CUDA device: no other
    GPU is touched) and loader-generator states, in plain types and tensors only
    (``torch.load(weights_only=True)`` reads them back)."""
    version, internal, gauss = random.getstate()
    _, key, pos, has_gauss, cached = np.random.get_state()
    return {
        "python": [version, list(internal), gauss],
        "numpy": {"key": torch.from_numpy(np.asarray(key, dtype=np.int64)), "pos": int(pos),
                  "has_gauss": int(has_gauss), "cached_gaussian": float(cached)},
        "torch": torch.get_rng_state(),
        "cuda": torch.cuda.get_rng_state(device) if device is not None and device.type == "cuda" else None,
        "loader": loader_generator.get_state() if loader_generator is not None else None,
    }


def remove_stale_tmp(wdir: Path) -> list[Path]:
    """Delete the temporary checkpoint files (``.last.pt.*.tmp``, ``.best.pt.*.tmp``) that an
    interrupted write left in ``wdir``; returns what was removed.

    Uses :func:`libreyolo.io.checkpoint.remove_stale_partials` (which leaves a write still running
    in a live process alone) where that exists, else removes every such file (one INFO line each).
    """
    try:
        from ..io.checkpoint import remove_stale_partials
    except ImportError:
        remove_stale_partials = None
    removed: list[Path] = []
    if remove_stale_partials is not None:
        for name in ("last.pt", "best.pt"):
            removed += remove_stale_partials(Path(wdir) / name)
        return removed
    for tmp in sorted(Path(wdir).glob(".*.pt.*.tmp")):
        try:
            size = tmp.stat().st_size
            tmp.unlink()
        except FileNotFoundError:
            continue
        removed.append(tmp)
        logger.info("removed %s (%.1f MB), left by an interrupted checkpoint write", tmp.name, size / 2**20)
    return removed
