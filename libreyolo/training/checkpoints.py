"""Checkpoints of the trainer: what ``last.pt`` / ``best.pt`` hold, and resuming from them.

:class:`Checkpointer` is the trainer's part that writes and reads them. ``last.pt`` is written every epoch with the
full training state (network, optimizer, EMA, scaler, schedule, counters) so that ``resume=True``
continues where the run stopped; a run that trains all its epochs strips it to the final weights,
args and metrics at the end. ``best.pt`` holds the EMA weights and metrics only. Both go through
:func:`libreyolo.io.checkpoint.save_model` (temporary file, fsync, rename), so a kill mid-save
never leaves a corrupt file; the temporary files a kill leaves behind (``.last.pt.*.tmp``) are
removed at the start of the next save or resume. With ``save_period=N``, ``epoch<N>.pt`` (1-based,
as in ``results.csv``) is a resumable copy of ``last.pt`` every N epochs (copied, then renamed).

Writing happens in the background: :meth:`Checkpointer.save` copies everything the epoch's files
hold to host memory (the training loop then goes on changing its tensors freely) and hands the
serialisation, fsync and rename to one worker thread (:class:`BackgroundWriter`), so the next
epoch does not wait for the disk. At most one write is pending: the next save, ``strip_last``,
``load_final`` and ``close`` wait for it first, and an error of the write (a full disk) is raised
there.

Resume reproduces the uninterrupted run exactly (bit for bit on the CPU) at epoch boundaries,
because an epoch boundary is a clean cut: every epoch ends with an optimizer step (no gradient is
carried into the next epoch), the sampler and the augmentation are functions of
``(seed, epoch, index)``, and ``last.pt`` holds everything else the next epoch reads: network,
optimizer, EMA (with its update count), gradient scaler, the optimizer-step counter, the early-stop
counter and the Python, NumPy, torch (CPU and CUDA) and loader-generator random states.
"""

from __future__ import annotations

import dataclasses
import logging
import math
import random
import shutil
from collections.abc import Callable
from concurrent.futures import Future, ThreadPoolExecutor
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


@dataclasses.dataclass(frozen=True, kw_only=True)
class Progress:
    """The loop's counters a checkpoint carries: ``epoch`` (0-based, the last finished one),
    ``best_fitness`` / ``best_metrics`` (best.pt's epoch), ``last_opt_step`` (the iteration of the
    last optimizer step) and ``stale`` (epochs without improvement, for ``patience``)."""

    epoch: int
    best_fitness: float
    best_metrics: dict[str, float]
    last_opt_step: int
    stale: int


def open_resume(cfg: TrainConfig, explicit: set[str]) -> tuple[Path, dict[str, Any], TrainConfig]:
    """(checkpoint path, checkpoint, the run's config) of a ``resume`` run (:func:`resolve_resume`);
    removes the temporary files an interrupted write left beside it. Every rank reads it (rank 0
    alone writes checkpoints)."""
    path, ckpt, cfg = resolve_resume(cfg, explicit)
    remove_stale_tmp(path.parent)
    logger.info("resuming %s from epoch %d of %d", path, int(ckpt["train_state"]["epoch"]) + 2, cfg.epochs)
    return path, ckpt, cfg


def restore_rng(rng: dict[str, Any] | None, *, loader_generator: torch.Generator | None, distributed: bool,
                device: torch.device | None) -> None:
    """Put back the random states saved with the epoch (called after everything set-up draws)."""
    if not rng:
        return
    if loader_generator is not None and rng.get("loader") is not None:
        loader_generator.set_state(rng["loader"])
    if distributed:  # rank 0's global streams are not the other ranks':
        return  # under DDP every rank keeps its own seed + rank streams (the loop draws nothing from them)
    random.setstate((rng["python"][0], tuple(rng["python"][1]), rng["python"][2]))
    np.random.set_state(("MT19937", rng["numpy"]["key"].numpy().astype(np.uint32), int(rng["numpy"]["pos"]),
                         int(rng["numpy"]["has_gauss"]), float(rng["numpy"]["cached_gaussian"])))
    torch.set_rng_state(rng["torch"])
    if isinstance(rng.get("cuda"), torch.Tensor) and device is not None and device.type == "cuda":
        torch.cuda.set_rng_state(rng["cuda"], device)


def host_copy(obj: Any) -> Any:
    """``obj`` with every tensor inside (dicts, lists, tuples) replaced by a CPU copy of it.

    Example:
        >>> host_copy({"a": [torch.ones(2)], "b": 3})
        {'a': [tensor([1., 1.])], 'b': 3}
    """
    if isinstance(obj, Tensor):
        return obj.detach().to("cpu", copy=True)
    if isinstance(obj, dict):
        return {k: host_copy(v) for k, v in obj.items()}
    if isinstance(obj, (list, tuple)):
        return type(obj)(host_copy(v) for v in obj)
    return obj


class BackgroundWriter:
    """Runs one write at a time on a worker thread; :meth:`wait` blocks until it is done and raises
    its error, if any.

    Example:
        >>> w = BackgroundWriter()
        >>> w.submit(lambda: None)
        >>> w.wait()
        >>> w.close()
    """

    def __init__(self) -> None:
        self._pool: ThreadPoolExecutor | None = None
        self._pending: Future[None] | None = None

    def submit(self, write: Callable[[], None]) -> None:
        """Wait for the previous write, then start ``write()`` in the background."""
        self.wait()
        if self._pool is None:
            self._pool = ThreadPoolExecutor(max_workers=1, thread_name_prefix="libreyolo-checkpoint")
        self._pending = self._pool.submit(write)

    def wait(self) -> None:
        pending, self._pending = self._pending, None
        if pending is not None:
            pending.result()

    def close(self) -> None:
        """Wait for the pending write and stop the thread (the error of the write, if any, is raised)."""
        try:
            self.wait()
        finally:
            if self._pool is not None:
                self._pool.shutdown(wait=True)
                self._pool = None


class Checkpointer:
    """The run's ``weights/`` folder: writes ``last.pt`` / ``best.pt`` / ``epoch<N>.pt``, strips
    ``last.pt`` at the end, and loads a resumed run's optimizer, EMA and scaler state.

    Constructed with the objects whose state it saves (``net``, ``ema``, ``optimizer``, ``scaler``,
    the training loader's ``loader_generator``: built once at set-up, never replaced during a run)
    and the training ``device``; the config and the loop's :class:`Progress` come with each call. State: :attr:`wdir` and :attr:`saved_epochs`
    (epochs the last written ``last.pt`` holds; None before the first save).
    """

    def __init__(self, model: Family, wdir: Path, *, net: nn.Module, ema: ModelEMA | None,
                 optimizer: torch.optim.Optimizer, scaler: torch.amp.GradScaler,
                 loader_generator: torch.Generator | None, device: torch.device) -> None:
        self.model, self.wdir, self.net, self.ema = model, wdir, net, ema
        self.optimizer, self.scaler = optimizer, scaler
        self.loader_generator, self.device = loader_generator, device
        self.saved_epochs: int | None = None
        self.writer = BackgroundWriter()

    def wait(self) -> None:
        """Block until the pending background write is on disk (raises its error, if any)."""
        self.writer.wait()

    def close(self) -> None:
        """Finish the pending write and stop the writer thread."""
        self.writer.close()

    def restore(self, st: dict[str, Any]) -> Progress:
        """Load a checkpoint's ``train_state`` into the optimizer, EMA and scaler; returns its counters."""
        self.optimizer.load_state_dict(st["optimizer"])
        if self.ema is not None and st.get("ema") is not None:
            self.ema.load_state_dict(st["ema"])
        if st.get("scaler"):
            self.scaler.load_state_dict(st["scaler"])
        return Progress(epoch=int(st["epoch"]), best_fitness=float(st.get("best_fitness", -math.inf)),
                        best_metrics=dict(st.get("best_metrics") or {}),
                        last_opt_step=int(st.get("last_opt_step", -1)), stale=int(st.get("stale", 0)))

    def load_final(self) -> Path:
        """After the run: ``best.pt`` (else ``last.pt``) into the model, which is left in eval mode
        and remembers the file (``ckpt_path``); returns that file."""
        from ..io.checkpoint import load_state_into, read_checkpoint

        self.wait()
        best = self.wdir / "best.pt"
        src = best if best.is_file() else self.wdir / "last.pt"
        load_state_into(self.model, read_checkpoint(src)["model"], strict=True, where=str(src))
        self.model.net.eval()
        self.model.ckpt_path = str(src)
        return src

    def weights(self) -> dict[str, Tensor]:
        """What best.pt / last.pt hold as the model: the EMA weights when there is an EMA."""
        return (self.ema.module if self.ema is not None else self.net).state_dict()

    @staticmethod
    def _common(cfg: TrainConfig, epoch: int, metrics: dict[str, float]) -> dict[str, Any]:
        return {"train_args": cfg.to_dict(), "epoch": epoch, "metrics": dict(metrics)}

    def strip_last(self, cfg: TrainConfig, epoch: int, metrics: dict[str, float]) -> None:
        """A run that trained all its epochs: ``last.pt`` is rewritten with the final weights, args and
        metrics but no ``train_state`` (optimizer, EMA, RNG: most of its size), like ``best.pt``. A run
        stopped early (interrupt, error, ``time_limit``, ``patience``) keeps it resumable."""
        from ..io.checkpoint import save_model

        self.wait()
        save_model(self.model, self.wdir / "last.pt", state_dict=self.weights(),
                   extra=self._common(cfg, epoch, metrics))

    def save(self, cfg: TrainConfig, metrics: dict[str, float], progress: Progress, *, best: bool) -> None:
        """The epoch's ``last.pt`` (resumable), ``best.pt`` when ``best``, ``epoch<N>.pt`` every
        ``save_period``: copied to host memory now, written in the background (module docstring)."""
        from ..io.checkpoint import atomic_save, checkpoint_object

        epoch = progress.epoch
        common = self._common(cfg, epoch, metrics)
        state = {
            "epoch": epoch,
            "best_fitness": progress.best_fitness,
            "best_metrics": dict(progress.best_metrics),
            "net": {k: v.detach().cpu().clone() for k, v in self.net.state_dict().items()},
            "optimizer": host_copy(self.optimizer.state_dict()),
            "ema": host_copy(self.ema.state_dict()) if self.ema is not None else None,
            "scaler": self.scaler.state_dict() if self.scaler.is_enabled() else {},
            "last_opt_step": progress.last_opt_step,
            "stale": int(progress.stale),
            "rng": rng_state(self.loader_generator, device=self.device),
            "schedule": {"epochs": cfg.epochs, "lrf": cfg.lrf, "cos": cfg.cos_lr},
        }
        last = checkpoint_object(self.model, state_dict=self.weights(), extra={**common, "train_state": state})
        best_obj = {k: v for k, v in last.items() if k != "train_state"} if best else None
        period = cfg.save_period > 0 and (epoch + 1) % cfg.save_period == 0
        wdir = self.wdir

        def write() -> None:
            remove_stale_tmp(wdir)  # the writer also does this per file where io.checkpoint supports it
            atomic_save(last, wdir / "last.pt")
            if best_obj is not None:
                atomic_save(best_obj, wdir / "best.pt")
            if period:  # a resumable copy of last.pt
                tmp = wdir / f".epoch{epoch + 1}.pt.copy"
                shutil.copyfile(wdir / "last.pt", tmp)
                tmp.replace(wdir / f"epoch{epoch + 1}.pt")
            self.saved_epochs = epoch + 1

        self.writer.submit(write)


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
