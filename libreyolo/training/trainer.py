"""The training loop (DESIGN convention 12: loop + hooks).

The loop owns accumulation, AMP, the optimiser step, checkpointing and resume. The family
supplies hooks: ``build_net`` (also used to rebuild the head for a new class count),
``build_criterion``, ``postprocess`` (validation) and, optionally, ``on_close_mosaic(criterion)``
(called once when mosaic is switched off for the last ``close_mosaic`` epochs). EMA (:mod:`.ema`), the LR schedule
(:mod:`.scheduler`), parameter groups (:mod:`.optim`), loggers (:mod:`.loggers`) and graph
capture are separate modules the loop calls; datasets and loaders (:mod:`.data_setup`) and
checkpoints / resume (:mod:`.checkpoints`) are mixins of :class:`Trainer`. Nothing happens in
``__init__``; ``fit()`` does it.

The forward/backward seam (where CUDA-graph training capture plugs in)::

    preds = self._forward(imgs)          # graph_capture.forward(imgs) if a capture object is set
                                         # (after graph_capture.maybe_capture(imgs)), else
                                         # self.forward_fn(imgs): model.net(imgs) under autocast
    loss, items = self.criterion(preds, batch)     # eager, may sync
    self.scaler.scale(loss).backward()             # replays a captured backward when present

``graph_capture`` is None unless ``cuda_graph=True`` and
``libreyolo.graphs.training.unsupported_reason`` finds nothing against it (family flag
``SUPPORTS_TRAIN_CUDA_GRAPH``, CUDA device, no DDP); then it is a
``libreyolo.graphs.training.TrainGraphs``. The loop needs from it ``forward(imgs) -> preds``
(outputs whose backward runs the captured backward), optionally ``maybe_capture(imgs)`` (called
first), and ``zero_grad(optimizer)`` (in-place zeroing while a graph is live, SPEC T-7). A
:class:`~libreyolo.errors.GraphCaptureError` escaping a hook turns capture off for the rest of the
run with one warning (SPEC T-4); the optimiser step, clipping, EMA and schedule stay eager.

Non-finite losses. Without a gradient scaler (fp32, CPU) the batch is checked on the host and
skipped (every DDP rank skips, or none). With AMP's scaler there is no per-batch host check: a
non-finite loss is made to give non-finite gradients, so the scaler skips that optimizer step on
every rank and lowers its scale; under gradient accumulation this drops the whole accumulation
window the batch belongs to. Either way the epoch's mean losses cover the finite batches only,
and a warning names how many were skipped. Loss items are read back to the host every
``REFRESH_EVERY`` batches, not every batch.

Classification models (``OUTPUT_KIND == "probs"``) read ImageFolder datasets
(:mod:`libreyolo.data.classify`), default to the family's ``imgsz`` and ``runs/classify``, and pick
best.pt by top-1 accuracy.

Outputs (``runs/detect/<name>/``): ``weights/last.pt`` (every epoch, atomic, with the full
training state for ``resume``), ``weights/best.pt`` (best fitness = 0.1 mAP50 + 0.9 mAP50-95,
EMA weights only), ``results.csv`` (training and validation losses, metrics), ``results.png``,
``args.yaml``, TensorBoard events when available and, with ``plots=True``, ``train_batch<i>.png``,
``train_labels.png`` and the final validation's pictures (:mod:`libreyolo.engine.val_plots`). A
kill loses at most the current epoch.
"""

from __future__ import annotations

import contextlib
import dataclasses
import logging
import math
import os
import random
import time
from collections.abc import Callable
from pathlib import Path
from typing import TYPE_CHECKING, Any

import numpy as np
import torch
import yaml
from torch import Tensor

from ..errors import ConfigError, GraphCaptureError
from .checkpoints import CheckpointMixin
from .config import RESUME_OVERRIDABLE, TrainConfig, resolve_resume  # noqa: F401 (re-exported)
from .data_setup import DataSetupMixin
from .distributed import (
    DistContext,
    all_true,
    barrier,
    broadcast_object,
    cleanup_distributed,
    convert_sync_batchnorm,
    gather_digests,
    revert_sync_batchnorm,
    setup_distributed,
    wrap_ddp,
)
from .ema import ModelEMA
from .loggers import ResultsLogger
from .optim import AUTO_SGD_MIN_STEPS, build_optimizer, choose_optimizer
from .scheduler import LRSchedule, count_optimizer_steps, warmup_iterations

if TYPE_CHECKING:
    from ..models._base.family import Family

logger = logging.getLogger(__name__)
# Loss items are read back to the host (progress bar, running means) once every this many batches.
REFRESH_EVERY = 10
# fewer optimizer steps than this in a run: one warning with the numbers
FEW_STEPS = 10
# with plots=True, the first epoch's first batches are drawn (train_batch<i>.png)
PLOT_BATCHES = 3


def _s(n: int) -> str:
    """Plural suffix: ``f"{n} epoch{_s(n)}"``."""
    return "" if n == 1 else "s"


def train(model: Family, overrides: dict[str, Any]) -> dict[str, Any]:
    """``model.train(**overrides)``: returns the best epoch's metrics plus ``save_dir``, ``best``, ``last``.

    More than one device (``device="0,1"``, or ``device="cpu", world_size=2``) outside a torchrun
    world launches DDP through torchrun (:mod:`.launch`); inside one, the trainer joins it.
    """
    from .distributed import in_torchrun_world, parse_devices

    explicit = set(overrides)
    overrides = with_family_defaults(model, overrides)
    cfg = TrainConfig.from_overrides(overrides)
    if not in_torchrun_world():
        if cfg.resume:  # device / world_size come from the checkpoint unless given again
            path, _, cfg = resolve_resume(cfg, explicit)
            overrides = {**overrides, "resume": str(path)}
        plan = parse_devices(cfg.device, world_size=cfg.world_size)
        if plan.distributed:
            from .launch import launch_training

            return launch_training(model, overrides, plan)
    return Trainer(model, cfg, explicit=explicit).fit()


def with_family_defaults(model: Family, overrides: dict[str, Any]) -> dict[str, Any]:
    """The family's training recipe (``TRAIN_DEFAULTS``, e.g. AdamW and fp32 for D-FINE) under
    the user's keys: what the user passes wins. A resumed run keeps its saved arguments."""
    defaults = dict(getattr(type(model), "TRAIN_DEFAULTS", None) or {})
    applied = {k: v for k, v in defaults.items() if k not in overrides}
    if not applied or overrides.get("resume"):
        return dict(overrides)
    logger.info("%s recipe defaults: %s (pass a key to override it)", model.FAMILY,
                ", ".join(f"{k}={v}" for k, v in applied.items()))
    return {**applied, **overrides}


class Trainer(DataSetupMixin, CheckpointMixin):
    """Train ``model`` (a Family) in place; afterwards ``model.net`` holds the best EMA weights.

    Example:
        >>> Trainer(model, TrainConfig(data="shapes", epochs=1, imgsz=320)).fit()  # doctest: +SKIP
    """

    def __init__(self, model: Family, cfg: TrainConfig, *, explicit: set[str] | None = None) -> None:
        self.model = model
        self.cfg = cfg
        self.explicit = set(explicit or ())
        self.forward_fn: Callable[[Tensor], Any] = self._eager_forward
        self.graph_capture: Any = None
        # called after each epoch's checkpoint and log row: fn(trainer, row)
        self.callbacks: list[Callable[[Trainer, dict[str, float]], None]] = []
        self.start_epoch = 0
        self.epoch = 0
        self.best_fitness = -math.inf
        self.best_metrics: dict[str, float] = {}
        self.last_metrics: dict[str, float] = {}
        self._det_state: tuple[bool, bool, bool, bool] | None = None
        self.dist: DistContext | None = None  # set in setup() inside a torchrun world
        self.rank_digests: list[str] = []
        self.stale = 0  # epochs since fitness last improved (early stop)
        self.save_dir: Path | None = None
        self._made_run_dir = False  # this run created save_dir (a failure before any checkpoint removes it)

    @property
    def is_main(self) -> bool:
        """Rank 0 of a DDP run, or the only process: validates, saves, logs."""
        return self.dist is None or self.dist.is_main

    # ------------------------------------------------------------------ public
    def fit(self) -> dict[str, Any]:
        try:
            self.setup()
            self._loop()
            if self.dist is not None:  # replicas must agree; rank 0's files are complete after this
                self.rank_digests = gather_digests(self.net, self.dist)
                if len(set(self.rank_digests)) != 1:
                    raise RuntimeError(f"DDP replicas diverged (parameter digests {self.rank_digests}); "
                                       "please report this with the run's args.yaml")
                barrier(self.dist)
        except BaseException as e:
            self._after_failure(interrupted=isinstance(e, KeyboardInterrupt))
            raise
        finally:
            self.teardown()  # also on errors and KeyboardInterrupt: loaders, loggers, global flags
        return self._finish()

    def _after_failure(self, *, interrupted: bool) -> None:
        """A run that stops early: say how to resume when a checkpoint exists; remove the run
        folder this run created when it holds no checkpoint (nothing in it is worth keeping)."""
        if not self.is_main or self.save_dir is None:
            return
        last = self.save_dir / "weights" / "last.pt"
        if last.is_file():
            if interrupted:
                logger.warning("interrupted after epoch %d; resume with: libreyolo train resume=%s  "
                               "(Python: model.train(resume=%r))", getattr(self, "saved_epochs", self.start_epoch),
                               last, str(last))
            return
        if self._made_run_dir:
            import shutil

            if getattr(self, "results", None) is not None:
                self.results.close()  # release its files (TensorBoard events) before removing the folder
                self.results = None
            shutil.rmtree(self.save_dir, ignore_errors=True)
            logger.info("removed %s: the run stopped before its first checkpoint", self.save_dir)

    # ------------------------------------------------------------------ setup
    def setup(self) -> None:
        """Resolve resume, device, data, model head, run dir, loaders, optimiser and state."""
        from ..data.config import load_data_config
        from ..models._base.family import select_device

        if not self.cfg.resume:
            self.cfg = self._task_defaults(self.cfg)
        ckpt = self._resume_checkpoint() if self.cfg.resume else None
        cfg = self.cfg
        if self.model.fused:
            raise ConfigError("this model was fused for inference (fuse()); a fused model cannot train: "
                              "load the checkpoint again without fusing")
        self.dist = setup_distributed(cfg.device, world_size=cfg.world_size)
        self.device = self.dist.device if self.dist is not None else select_device(cfg.device)
        self._seed()  # the same seed on every rank: identical initial weights (DDP also broadcasts rank 0's)
        self.data = self._load_data(cfg.data, load_data_config)
        self._match_classes()
        self.model.imgsz = cfg.imgsz
        self.model.to(self.device)
        if ckpt is not None:
            from ..io.checkpoint import load_state_into

            load_state_into(self.model, ckpt["train_state"]["net"], strict=True, where=str(self.resume_path))
        if self.dist is not None and cfg.sync_bn:
            if self.device.type == "cuda":
                self.model.net = convert_sync_batchnorm(self.model.net)
            else:
                logger.warning("sync_bn=True ignored: SyncBatchNorm needs CUDA devices (this run is on %s)",
                               self.device)
        self.net = self.model.net
        self.net.train()
        self.train_net: torch.nn.Module = self.net  # what the loop calls: the DDP wrapper under DDP
        if self.dist is not None:
            self.train_net = wrap_ddp(self.net, self.dist)
            s = cfg.seed + self.dist.rank  # per-rank global RNG streams from here on
            random.seed(s)
            np.random.seed(s)
            torch.manual_seed(s)
        save_dir = None
        if self.is_main:  # rank 0 alone creates the run directory; the others learn its name
            save_dir = self.resume_path.parent.parent if ckpt is not None else _increment_dir(
                Path(cfg.project) / cfg.name, exist_ok=cfg.exist_ok)
            self._made_run_dir = ckpt is None and not save_dir.exists()
            (save_dir / "weights").mkdir(parents=True, exist_ok=True)
            (save_dir / "args.yaml").write_text(yaml.safe_dump(cfg.to_dict(), sort_keys=False))
        self.save_dir = Path(broadcast_object(str(save_dir), self.dist))
        self.wdir = self.save_dir / "weights"
        self._build_loaders()

        self.criterion = self.model.build_criterion()
        hyp = getattr(self.criterion, "hyp", None)
        if isinstance(hyp, dict):  # only gains the user set: each family keeps its own defaults
            hyp.update({k: getattr(cfg, k) for k in hyp if k in self.explicit and hasattr(cfg, k)})

        nb = len(self.train_loader)
        self.nb = nb
        total_batch = self.batch * (self.dist.world_size if self.dist is not None else 1)
        self.accumulate = max(round(cfg.nbs / total_batch), 1)
        wd = cfg.weight_decay * total_batch * self.accumulate / cfg.nbs
        plan = LRSchedule(epochs=cfg.epochs, lrf=cfg.lrf, cos=cfg.cos_lr,
                          warmup_iters=warmup_iterations(warmup_epochs=cfg.warmup_epochs, iters_per_epoch=nb,
                                                         epochs=cfg.epochs),
                          warmup_bias_lr=cfg.warmup_bias_lr, warmup_momentum=cfg.warmup_momentum,
                          momentum=cfg.momentum, accumulate=self.accumulate,
                          nominal_accumulate=max(cfg.nbs / total_batch, 1.0))
        steps = count_optimizer_steps(plan, iters_per_epoch=nb, epochs=cfg.epochs)
        choice_steps = steps
        if ckpt is not None and cfg.optimizer == "auto":  # epochs=N on resume must not switch SGD <-> AdamW
            saved_groups = ckpt["train_state"]["optimizer"]["param_groups"]
            choice_steps = 0 if saved_groups and "betas" in saved_groups[0] else AUTO_SGD_MIN_STEPS + 1
        choice = choose_optimizer(name=cfg.optimizer, lr0=cfg.lr0, momentum=cfg.momentum, nc=self.model.nc,
                                  total_steps=choice_steps)
        self.optimizer = build_optimizer(self.net, choice, weight_decay=wd, device=self.device)
        # A high bias lr destabilises Adam (measured: a tiny shapes run diverges from warmup_bias_lr=0.1):
        # under AdamW the bias group warms up from 0 like the others unless warmup_bias_lr is given.
        bias_lr = cfg.warmup_bias_lr if choice.name == "SGD" or "warmup_bias_lr" in self.explicit else 0.0
        self.schedule = dataclasses.replace(plan, momentum=choice.momentum, warmup_bias_lr=bias_lr)
        self.total_steps = steps
        left = count_optimizer_steps(self.schedule, iters_per_epoch=nb, epochs=cfg.epochs,
                                     start_epoch=int(ckpt["train_state"]["epoch"]) + 1 if ckpt is not None else 0)
        if left < FEW_STEPS and self.is_main:
            logger.warning("this run makes only %d optimizer step%s: %d epoch%s x %d batch%s of %d, accumulating up "
                           "to %d batch%s per step (nbs %d); every epoch ends with a step. For more steps use more "
                           "epochs or data, or a smaller nbs", left, _s(left), cfg.epochs, _s(cfg.epochs), nb,
                           "es" if nb != 1 else "", total_batch, self.accumulate, "es" if self.accumulate != 1 else "",
                           cfg.nbs)
        self.amp_dtype = None
        if cfg.amp and self.device.type == "cuda":
            self.amp_dtype = torch.bfloat16 if cfg.amp_dtype == "bfloat16" else torch.float16
        self.scaler = torch.amp.GradScaler("cuda", enabled=self.amp_dtype == torch.float16)
        self.ema = ModelEMA(self.net, decay=cfg.ema_decay, tau=cfg.ema_tau) if cfg.ema else None
        self.last_opt_step = -1
        if ckpt is not None:
            self._load_train_state(ckpt["train_state"])
        self.results = (ResultsLogger(self.save_dir, tensorboard=cfg.tensorboard, plots=cfg.plots,
                                      start_epoch=self.start_epoch) if self.is_main else None)
        self._setup_graph_capture()
        self._restore_rng()  # a resumed run continues the saved random streams (no-op otherwise)
        sync = any(isinstance(m, torch.nn.SyncBatchNorm) for m in self.net.modules())
        ddp = (f", DDP {self.dist.world_size} processes x batch {self.batch} ({self.dist.backend}"
               f"{', SyncBatchNorm' if sync else ''})" if self.dist is not None else "")
        logger.info("training %s-%s on %s: %d epoch%s from %d, batch %d%s (accumulate %d after a %d-iteration "
                    "warm-up, nbs %d; %d optimizer steps), imgsz %d, device %s, amp %s -> %s", self.model.FAMILY,
                    self.model.size, cfg.data, cfg.epochs, _s(cfg.epochs), self.start_epoch + 1, cfg.batch, ddp,
                    self.accumulate, self.schedule.warmup_iters, cfg.nbs, self.total_steps, cfg.imgsz, self.device,
                    self.amp_dtype, self.save_dir)

    def _seed(self) -> None:
        s = self.cfg.seed
        random.seed(s)
        np.random.seed(s)
        torch.manual_seed(s)
        if self.cfg.deterministic:
            self._det_state = (torch.are_deterministic_algorithms_enabled(),
                               torch.is_deterministic_algorithms_warn_only_enabled(),
                               torch.backends.cudnn.deterministic, torch.backends.cudnn.benchmark)
            os.environ.setdefault("CUBLAS_WORKSPACE_CONFIG", ":4096:8")
            torch.use_deterministic_algorithms(True, warn_only=True)
            torch.backends.cudnn.deterministic = True
            torch.backends.cudnn.benchmark = False

    def _setup_graph_capture(self) -> None:
        if not self.cfg.cuda_graph:
            return
        try:
            from ..graphs.training import TrainGraphs, unsupported_reason
        except ImportError as e:
            logger.warning("training eager: cuda_graph=True ignored because training capture is unavailable (%s)", e)
            return
        reason = unsupported_reason(self.model, device=self.device, distributed=self.dist is not None)
        if self.dist is not None and reason is not None and "distributed" not in reason:
            reason = f"distributed training (DDP) is not captured (also: {reason})"
        # A family split at a seam (SPEC G-9) names its capturable training trunk; the rest of its
        # forward (e.g. a denoising decoder) runs inside its criterion, eager.
        stages = self.model.train_stages()
        target = stages[0].fn if stages and stages[0].capturable else self.net
        capture = TrainGraphs(target, requested=True, amp_dtype=self.amp_dtype, reason=reason)  # logs one line
        self.graph_capture = capture if capture.enabled else None
        self._graph_report = capture  # kept after a fallback too: the result says what happened

    # ------------------------------------------------------------------ the loop
    def _eager_forward(self, imgs: Tensor) -> Any:
        ctx = (torch.autocast(self.device.type, dtype=self.amp_dtype) if self.amp_dtype is not None
               else contextlib.nullcontext())
        with ctx:
            return self.train_net(imgs)

    def _forward(self, imgs: Tensor) -> Any:
        gc = self.graph_capture
        if gc is not None:
            try:
                if hasattr(gc, "maybe_capture"):
                    gc.maybe_capture(imgs)
                return gc.forward(imgs)
            except GraphCaptureError as e:
                logger.warning("training eager from now on: graph capture failed: %s", e)
                self.graph_capture = None
        return self.forward_fn(imgs)

    def _zero_grad(self) -> None:
        """Zero gradients; a live training graph needs it done in place (SPEC T-7)."""
        gc = self.graph_capture
        if gc is not None and hasattr(gc, "zero_grad"):
            gc.zero_grad(self.optimizer)
        else:
            self.optimizer.zero_grad(set_to_none=True)

    def _loop(self) -> None:
        t_start = time.perf_counter()
        epoch = self.start_epoch
        while epoch < self.cfg.epochs:  # cfg.epochs may shrink under time_limit (see _replan)
            cfg = self.cfg
            self.epoch = epoch
            t_epoch = time.perf_counter()
            if cfg.close_mosaic and epoch >= cfg.epochs - cfg.close_mosaic and self.train_ds.mosaic_enabled:
                left = cfg.epochs - epoch
                if epoch == 0:
                    logger.info("mosaic off for the whole run (close_mosaic=%d covers all %d epoch%s)",
                                cfg.close_mosaic, cfg.epochs, _s(cfg.epochs))
                else:
                    logger.info("closing mosaic for the last %d epoch%s", left, _s(left))
                self.train_ds.close_mosaic()
                hook = getattr(self.model, "on_close_mosaic", None)  # family hook, e.g. extra loss terms
                if hook is not None:
                    hook(self.criterion)
            self.train_ds.set_epoch(epoch)
            if self.train_sampler is not None:
                self.train_sampler.set_epoch(epoch)
            losses = self._train_epoch(epoch)
            train_s = time.perf_counter() - t_epoch
            if not self.is_main:  # rank 0 validates, saves and logs; the others wait for its decision
                stop, epochs = broadcast_object(None, self.dist)
                if epochs != self.cfg.epochs:
                    self.cfg = dataclasses.replace(self.cfg, epochs=epochs)
                    self.schedule = dataclasses.replace(self.schedule, epochs=epochs)
                if stop:
                    break
                epoch += 1
                continue
            metrics = self._validate(final=epoch == cfg.epochs - 1)
            fit = metrics.get("fitness", -math.inf) if metrics else -math.inf
            improved = fit > self.best_fitness or not metrics
            if improved:
                self.best_fitness, self.best_metrics = fit, dict(metrics)
                self.stale = 0
            else:
                self.stale += 1
            self.last_metrics = metrics
            self._save(epoch, metrics, best=improved)
            row: dict[str, float] = {"epoch": epoch + 1}
            row.update({f"train/{n}_loss": float(v) for n, v in zip(self._loss_names(), losses.tolist(), strict=False)})
            for k in ("precision", "recall", "mAP50", "mAP50-95", "top1", "top5"):
                if k in metrics:
                    row[f"metrics/{k}"] = metrics[k]
            row.update({f"val/{n}_loss": v for n, v in getattr(metrics, "losses", {}).items()})
            row.update({f"lr/pg{i}": g["lr"] for i, g in enumerate(self.optimizer.param_groups)})
            row["time/epoch_s"] = train_s
            row["time/images_per_s"] = len(self.train_ds) / max(train_s, 1e-9)
            assert self.results is not None  # rank 0
            self.results.log(row)
            for cb in self.callbacks:  # rank 0 only under DDP
                cb(self, row)
            stop = False
            if cfg.patience and self.stale >= cfg.patience:
                logger.info("early stop: no fitness improvement in %d epochs", cfg.patience)
                stop = True
            if not stop and cfg.time_limit and not self._replan(epoch, elapsed=time.perf_counter() - t_start,
                                                                last_epoch_s=time.perf_counter() - t_epoch):
                stop = True
            broadcast_object((stop, self.cfg.epochs), self.dist)
            if stop:
                break
            epoch += 1

    def _replan(self, epoch: int, *, elapsed: float, last_epoch_s: float) -> bool:
        """Fit the run into ``time_limit`` seconds of epoch loop; False = stop now.

        From the second epoch of this run on, the remaining epoch count is cut to what the last
        epoch's wall time (training + validation + checkpoint) says still fits, and the LR
        schedule and close_mosaic follow the new end. Never grows the run.
        """
        cfg = self.cfg
        remaining = cfg.time_limit - elapsed
        if epoch + 1 >= cfg.epochs:
            return True
        if remaining < last_epoch_s:
            logger.warning("time_limit %.0f s: stopping after epoch %d of %d", cfg.time_limit, epoch + 1, cfg.epochs)
            return False
        if epoch > self.start_epoch:
            fits = epoch + 1 + int(remaining // max(last_epoch_s, 1e-6))
            if fits < cfg.epochs:
                logger.info("time_limit %.0f s: %d epochs fit instead of %d; schedule shortened", cfg.time_limit,
                            fits, cfg.epochs)
                self.cfg = dataclasses.replace(cfg, epochs=fits)
                self.schedule = dataclasses.replace(self.schedule, epochs=fits)
        return True

    def _loss_names(self) -> tuple[str, ...]:
        return tuple(getattr(self.model, "LOSS_NAMES", ())) or ("loss",)

    def _train_epoch(self, epoch: int) -> Tensor:
        from tqdm import tqdm

        cfg, nb = self.cfg, self.nb
        self.net.train()
        names = self._loss_names()
        # Loss items stay on the device and are read every REFRESH_EVERY batches (and at the end):
        # a host read per batch would stall the launch queue every step.
        sums: Tensor | None = None  # sum of finite per-batch items
        n_finite: Tensor | None = None  # number of batches with a finite loss
        mloss: Tensor | None = None
        skipped_seen = host_skipped = 0
        bar = tqdm(enumerate(self.train_loader), total=nb, disable=not (cfg.verbose and self.is_main),
                   dynamic_ncols=True,
                   desc=f"{epoch + 1}/{cfg.epochs}", leave=True)
        ddp = self.dist
        # With a gradient scaler a non-finite loss needs no host check: its gradients are
        # non-finite too (all-reduced to every rank under DDP), so the scaler skips that optimizer
        # step on every process. Without one, the batch is skipped here (one host sync per batch).
        check_on_host = not self.scaler.is_enabled()
        for i, batch in bar:
            ni = i + nb * epoch
            self.schedule.apply(self.optimizer, iteration=ni, epoch=epoch)
            if i < PLOT_BATCHES and epoch == self.start_epoch and cfg.plots and self.is_main:
                self._plot_batch(i, batch)
            imgs = batch["img"].to(self.device, non_blocking=True).float().div_(255.0)
            # a full window (accumulate_at ramps during warm-up), or the epoch's last batch: the
            # partly filled window steps too, with the sum of its micro-batch gradients
            step = i == nb - 1 or ni - self.last_opt_step >= self.schedule.accumulate_at(ni)
            # DDP: all-reduce gradients only on the micro-batch that steps the optimiser
            sync = (self.train_net.no_sync() if ddp is not None and not step  # type: ignore[operator]
                    else contextlib.nullcontext())
            with sync:
                preds = self._forward(imgs)
                loss, items = self.criterion(preds, batch)
                if check_on_host and not all_true(bool(torch.isfinite(loss)), ddp):  # every rank skips, or none
                    logger.warning("non-finite loss %s at epoch %d batch %d: batch skipped", items.tolist(),
                                   epoch + 1, i)
                    self._zero_grad()
                    host_skipped += 1
                    del preds, loss  # see below: no autograd graph may outlive its step
                    continue
                if not check_on_host:  # a non-finite loss must make the scaler skip, even where
                    # its gradients came out finite (e.g. an infinite term with a zero gradient)
                    loss = loss * torch.where(torch.isfinite(loss), 1.0, float("nan"))
                if ddp is not None:  # DDP averages gradients; the single-process loss scale is the sum
                    loss = loss * ddp.world_size
                self.scaler.scale(loss).backward()
                # Drop this step's autograd graph now, not when the names are rebound next step: a
                # training capture in the next forward fails (stream-capture invalidated) while an
                # older graph's AccumulateGrad nodes are still alive.
                del preds, loss
            if step:
                self._optimizer_step()
                self.last_opt_step = ni
            with torch.no_grad():  # device-side running sums: no host read, a handful of small kernels
                items = items.detach().float()
                ok = torch.isfinite(items).all()
                if sums is None or n_finite is None:
                    sums, n_finite = torch.zeros_like(items), torch.zeros((), device=items.device)
                sums.add_(torch.where(ok, items, 0.0))
                n_finite.add_(ok)
            if i % REFRESH_EVERY == 0 or i == nb - 1:
                mloss, skipped_seen = self._report_items(bar, epoch, sums, n_finite, seen=i + 1 - host_skipped,
                                                         skipped_before=skipped_seen, names=names, imgs=imgs,
                                                         batch=batch)
        bar.close()
        self.last_opt_step = nb * (epoch + 1) - 1  # the next epoch opens a new window (even after a skipped batch)
        if sums is not None and n_finite is not None:  # the final value (a skipped last batch left it stale)
            mloss = (sums / n_finite.clamp(min=1.0)).cpu()
        return mloss if mloss is not None else torch.zeros(len(names))

    def _report_items(self, bar: Any, epoch: int, sums: Tensor, n_finite: Tensor, *, seen: int,
                      skipped_before: int, names: tuple[str, ...], imgs: Tensor,
                      batch: dict[str, Any]) -> tuple[Tensor, int]:
        """(mean loss items so far, batches the scaler skipped so far), with one host read; warns
        about newly skipped batches and refreshes the progress bar."""
        cfg = self.cfg
        n = float(n_finite)
        mloss = (sums / max(n, 1.0)).cpu()
        skipped = seen - int(n)
        if skipped > skipped_before:
            logger.warning("non-finite loss in %d batch(es) of epoch %d so far: the gradient scaler skipped "
                           "those optimizer steps", skipped, epoch + 1)
        if cfg.verbose and self.is_main:
            mem = f"{torch.cuda.memory_reserved(self.device) / 2**30:.2f}G" if self.device.type == "cuda" else "-"
            desc = " ".join(f"{k}={v:.3f}" for k, v in zip(names, mloss.tolist(), strict=False))
            bar.set_description(f"{epoch + 1}/{cfg.epochs} mem={mem} {desc} inst={int(batch['cls'].numel())} "
                                f"size={imgs.shape[-1]}")
        return mloss, skipped

    def _optimizer_step(self) -> None:
        self.scaler.unscale_(self.optimizer)
        if self.cfg.clip_grad > 0:
            torch.nn.utils.clip_grad_norm_(self.net.parameters(), max_norm=self.cfg.clip_grad)
        self.scaler.step(self.optimizer)
        self.scaler.update()
        self._zero_grad()
        if self.ema is not None:
            self.ema.update(self.net)

    def _validate(self, *, final: bool) -> dict[str, float]:
        if self.val_loader is None:
            return {}
        from ..engine.validator import run_validation

        net = self.ema.module if self.ema is not None else self.net
        return run_validation(model=self.model, net=net, loader=self.val_loader, names=self.model.names,
                              conf=self.cfg.val_conf, iou=self.cfg.val_iou, max_det=self.cfg.max_det,
                              amp_dtype=self.amp_dtype, verbose=self.cfg.verbose or final,
                              progress=self.cfg.verbose, criterion=self.criterion, loss_names=self._loss_names(),
                              plots_dir=self.save_dir if final and self.cfg.plots else None)

    def _plot_batch(self, i: int, batch: dict[str, Any]) -> None:
        """``train_batch<i>.png`` (the augmented batch with its boxes) and, with the first, ``train_labels.png``."""
        if "bboxes" not in batch or self.save_dir is None:  # a classification batch has no boxes to draw
            return
        from ..engine.val_plots import plot_labels, plot_train_batch

        plot_train_batch(batch, self.save_dir / f"train_batch{i}.png", names=self.model.names)
        labels = getattr(self.train_ds, "labels", None)
        if i == 0 and labels is not None:
            plot_labels(labels, self.model.names, self.save_dir / "train_labels.png")

    # ------------------------------------------------------------------ checkpoints
    # ------------------------------------------------------------------ end
    def teardown(self) -> None:
        """Release loaders, loggers and the process group (also after an exception or KeyboardInterrupt)."""
        for name in ("train_loader", "val_loader"):
            if hasattr(self, name):
                setattr(self, name, None)
        if getattr(self, "results", None) is not None:
            self.results.close()
        if hasattr(self, "train_net"):
            self.train_net = self.net  # drop the DDP wrapper (and its communication buffers)
        if self.dist is not None and any(isinstance(m, torch.nn.SyncBatchNorm) for m in self.model.net.modules()):
            self.model.net = self.net = revert_sync_batchnorm(self.model.net)
        cleanup_distributed(self.dist)
        if self._det_state is not None:
            det, warn_only, cudnn_det, cudnn_bench = self._det_state
            torch.use_deterministic_algorithms(det, warn_only=warn_only)
            torch.backends.cudnn.deterministic, torch.backends.cudnn.benchmark = cudnn_det, cudnn_bench
            self._det_state = None

    def _finish(self) -> dict[str, Any]:
        from ..io.checkpoint import load_state_into, read_checkpoint

        best = self.wdir / "best.pt"
        src = best if best.is_file() else self.wdir / "last.pt"
        load_state_into(self.model, read_checkpoint(src)["model"], strict=True, where=str(src))
        self.model.net.eval()
        self.model.ckpt_path = str(src)
        self.model.train_args = self.cfg.to_dict()
        out: dict[str, Any] = dict(self.best_metrics or self.last_metrics)
        out.update(save_dir=str(self.save_dir), best=str(best) if best.is_file() else None,
                   last=str(self.wdir / "last.pt"), epochs=self.epoch + 1)
        if self.dist is not None:
            out.update(world_size=self.dist.world_size, rank_digests=list(self.rank_digests))
        report = getattr(self, "_graph_report", None)
        if report is not None:  # cuda_graph=True: captured shapes and replays, or why it ran eager
            out["cuda_graph"] = report.info()
        logger.info("training done: %s; results in %s", {k: round(v, 4) for k, v in out.items()
                                                          if isinstance(v, float)}, self.save_dir)
        return out


def _increment_dir(path: Path, *, exist_ok: bool) -> Path:
    """``runs/detect/train`` -> the first of train, train2, train3, ... that does not exist."""
    if exist_ok or not path.exists():
        return path
    n = 2
    while (path.parent / f"{path.name}{n}").exists():
        n += 1
    return path.parent / f"{path.name}{n}"
