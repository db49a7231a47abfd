"""The epoch loop's bookkeeping: running loss means, per-stage timings, the progress line, the
results row and the ``time_limit`` re-plan. The loop (:mod:`libreyolo.training.trainer`) calls these; none of them
touches the model, the optimiser state or the data.
"""

from __future__ import annotations

import contextlib
import dataclasses
import logging
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import torch
from torch import Tensor

from .config import TrainConfig
from .scheduler import LRSchedule

logger = logging.getLogger(__name__)


class EpochLosses:
    """An epoch's loss items, summed on the device (no host read per batch).

    Batches whose items are not all finite are left out of the sums and counted; :meth:`report`
    reads the means back once and warns about batches the gradient scaler skipped since the
    previous report.
    """

    def __init__(self, names: tuple[str, ...]) -> None:
        self.names = names
        self.sums: Tensor | None = None  # sum of finite per-batch items
        self.n_finite: Tensor | None = None  # number of batches with a finite loss
        self.mean: Tensor | None = None  # the last means read back (CPU)
        self.skipped_seen = 0  # batches the scaler skipped, as of the last report

    def add(self, items: Tensor) -> None:
        """Add one batch's items (Tensor[len(names)]); a handful of small kernels, no host read."""
        with torch.no_grad():
            items = items.detach().float()
            ok = torch.isfinite(items).all()
            if self.sums is None or self.n_finite is None:
                self.sums, self.n_finite = torch.zeros_like(items), torch.zeros((), device=items.device)
            self.sums.add_(torch.where(ok, items, 0.0))
            self.n_finite.add_(ok)

    def report(self, *, epoch: int, seen: int) -> Tensor:
        """The mean items so far (one host read); ``seen``: batches that reached the criterion
        and were not skipped on the host. Warns when the scaler skipped more batches."""
        assert self.sums is not None and self.n_finite is not None  # called after add()
        n = float(self.n_finite)
        self.mean = (self.sums / max(n, 1.0)).cpu()
        skipped = seen - int(n)
        if skipped > self.skipped_seen:
            logger.warning("non-finite loss in %d batch(es) of epoch %d so far: the gradient scaler skipped "
                           "those optimizer steps", skipped, epoch + 1)
        self.skipped_seen = skipped
        return self.mean

    def final(self) -> Tensor:
        """The epoch's mean items (a skipped last batch may have left the last report stale)."""
        if self.sums is not None and self.n_finite is not None:
            self.mean = (self.sums / self.n_finite.clamp(min=1.0)).cpu()
        return self.mean if self.mean is not None else torch.zeros(len(self.names))


class StageTimer:
    """Wall seconds of the per-epoch stages (validation, checkpoint writing) as ``time/<stage>_s``
    in :attr:`seconds`, logged to ``results.csv`` with the epoch's row (a stage that did not run
    this epoch keeps its last value)."""

    def __init__(self) -> None:
        self.seconds: dict[str, float] = {}

    @contextlib.contextmanager
    def timed(self, stage: str) -> Iterator[None]:
        t0 = time.perf_counter()
        try:
            yield
        finally:
            self.seconds[f"time/{stage}_s"] = time.perf_counter() - t0


def progress_text(*, epoch: int, epochs: int, names: tuple[str, ...], mloss: Tensor, device: torch.device,
                  imgs: Tensor, batch: dict[str, Any]) -> str:
    """The progress bar's line: epoch, reserved CUDA memory, mean losses, instances, input size."""
    mem = f"{torch.cuda.memory_reserved(device) / 2**30:.2f}G" if device.type == "cuda" else "-"
    desc = " ".join(f"{k}={v:.3f}" for k, v in zip(names, mloss.tolist(), strict=False))
    inst = int(batch["cls"].numel()) if "cls" in batch else int(imgs.shape[0])  # semantic: images (no instances)
    return f"{epoch + 1}/{epochs} mem={mem} {desc} inst={inst} size={imgs.shape[-1]}"


def loss_row(*, epoch: int, names: tuple[str, ...], losses: Tensor) -> dict[str, float]:
    """``{"epoch": epoch + 1, "train/<name>_loss": mean, ...}``: the head of a ``results.csv`` row."""
    return {"epoch": epoch + 1, **{f"train/{n}_loss": float(v) for n, v in zip(names, losses.tolist(), strict=False)}}


def epoch_row(*, epoch: int, names: tuple[str, ...], losses: Tensor, metrics: dict[str, float],
              metric_keys: tuple[str, ...], optimizer: torch.optim.Optimizer, train_s: float,
              n_images: int) -> dict[str, float]:
    """One ``results.csv`` row: training losses, validation metrics (``metrics/<key>`` for each of
    the task's ``metric_keys`` that ``metrics`` holds, :attr:`~libreyolo.tasks.base.Task.metric_keys`)
    and losses, learning rates, epoch time and throughput."""
    row = loss_row(epoch=epoch, names=names, losses=losses)
    row.update({f"metrics/{k}": metrics[k] for k in metric_keys if k in metrics})
    row.update({f"val/{n}_loss": v for n, v in getattr(metrics, "losses", {}).items()})
    row.update({f"lr/pg{i}": g["lr"] for i, g in enumerate(optimizer.param_groups)})
    row["time/epoch_s"] = train_s
    row["time/images_per_s"] = n_images / max(train_s, 1e-9)
    return row


def replan_time_limit(cfg: TrainConfig, schedule: LRSchedule, *, epoch: int, start_epoch: int, elapsed: float,
                      last_epoch_s: float) -> tuple[bool, TrainConfig, LRSchedule]:
    """Fit the run into ``time_limit`` seconds of epoch loop: (go on, config, schedule).

    From the second epoch of this run on, the remaining epoch count is cut to what the last
    epoch's wall time (training + validation + checkpoint) says still fits, and the LR
    schedule and close_mosaic follow the new end. Never grows the run.
    """
    remaining = cfg.time_limit - elapsed
    if epoch + 1 >= cfg.epochs:
        return True, cfg, schedule
    if remaining < last_epoch_s:
        logger.warning("time_limit %.0f s: stopping after epoch %d of %d", cfg.time_limit, epoch + 1, cfg.epochs)
        return False, cfg, schedule
    if epoch > start_epoch:
        fits = epoch + 1 + int(remaining // max(last_epoch_s, 1e-6))
        if fits < cfg.epochs:
            logger.info("time_limit %.0f s: %d epochs fit instead of %d; schedule shortened", cfg.time_limit,
                        fits, cfg.epochs)
            cfg = dataclasses.replace(cfg, epochs=fits)
            schedule = dataclasses.replace(schedule, epochs=fits)
    return True, cfg, schedule


def _s(n: int) -> str:
    """Plural suffix: ``f"{n} epoch{_s(n)}"``."""
    return "" if n == 1 else "s"


def log_run_start(t: Any) -> None:
    """The one INFO line a set-up trainer ``t`` logs: family, data, epochs, batch (DDP layout),
    accumulation and optimizer steps, input size, device, AMP dtype and run folder."""
    cfg, dist = t.cfg, t.ddp.ctx
    sync = any(isinstance(m, torch.nn.SyncBatchNorm) for m in t.net.modules())
    ddp = (f", DDP {dist.world_size} processes x batch {t.data.batch} ({dist.backend}"
           f"{', SyncBatchNorm' if sync else ''})" if dist is not None else "")
    logger.info("training %s-%s on %s: %d epoch%s from %d, batch %d%s (accumulate %d after a %d-iteration "
                "warm-up, nbs %s; %d optimizer steps), imgsz %d, device %s, amp %s -> %s", t.model.FAMILY,
                t.model.size, cfg.data, cfg.epochs, _s(cfg.epochs), t.start_epoch + 1, cfg.batch, ddp,
                t.accumulate, t.schedule.warmup_iters, cfg.nbs if cfg.nbs is not None else "auto", t.total_steps, cfg.imgsz, t.device,
                t.amp_dtype, t.save_dir)


def close_mosaic_if_due(cfg: TrainConfig, *, epoch: int, train_ds: Any, model: Any, criterion: Any) -> None:
    """Switch mosaic off for the last ``close_mosaic`` epochs (once), then call the family's
    ``on_close_mosaic(criterion)`` hook (e.g. extra loss terms)."""
    if cfg.close_mosaic and epoch >= cfg.epochs - cfg.close_mosaic and train_ds.mosaic_enabled:
        left = cfg.epochs - epoch
        if epoch == 0:
            logger.info("mosaic off for the whole run (close_mosaic=%d covers all %d epoch%s)",
                        cfg.close_mosaic, cfg.epochs, _s(cfg.epochs))
        else:
            logger.info("closing mosaic for the last %d epoch%s", left, _s(left))
        train_ds.close_mosaic()
        hook = getattr(model, "on_close_mosaic", None)  # family hook, e.g. extra loss terms
        if hook is not None:
            hook(criterion)


def run_result(*, metrics: dict[str, float], save_dir: Path | None, wdir: Path, epochs: int, dist: Any,
               rank_digests: list[str], graph_report: Any) -> dict[str, Any]:
    """What ``train()`` returns: the best epoch's metrics (else the last's), ``save_dir``, ``best``
    (None without a best.pt), ``last``, ``epochs``; under DDP ``world_size`` and ``rank_digests``;
    with ``cuda_graph=True`` the capture report (``cuda_graph``). Logged once."""
    best = wdir / "best.pt"
    out: dict[str, Any] = dict(metrics)
    out.update(save_dir=str(save_dir), best=str(best) if best.is_file() else None,
               last=str(wdir / "last.pt"), epochs=epochs)
    if dist is not None:
        out.update(world_size=dist.world_size, rank_digests=list(rank_digests))
    if graph_report is not None:  # cuda_graph=True: captured shapes and replays, or why it ran eager
        out["cuda_graph"] = graph_report.info()
    logger.info("training done: %s; results in %s", {k: round(v, 4) for k, v in out.items()
                                                      if isinstance(v, float)}, save_dir)
    return out
