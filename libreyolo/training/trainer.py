"""The training loop (DESIGN convention 12: loop + hooks).

The loop owns accumulation, AMP, the optimiser step, checkpointing and resume. The family
supplies hooks: ``build_net`` (also used to rebuild the head for a new class count),
``build_criterion``, ``postprocess`` (validation) and, optionally, ``on_close_mosaic(criterion)``
(called once when mosaic is switched off for the last ``close_mosaic`` epochs). Composed
modules the loop calls: EMA (:mod:`.ema`), the LR schedule (:mod:`.scheduler`), parameter groups
(:mod:`.optim`), the optimisation plan (:mod:`.plan`), graph-capture set-up (:mod:`.capture`), the
epoch bookkeeping (:mod:`.bookkeeping`: running loss means, results rows, ``time_limit``), the run
folder (:mod:`.run_dir`), seeds and determinism (:mod:`.seeding`) and loggers (:mod:`.loggers`);
datasets and loaders (:mod:`.data_setup`) and checkpoints / resume (:mod:`.checkpoints`, with the
per-stage epoch timings) are mixins of :class:`Trainer`. Nothing happens in ``__init__``; ``fit()`` does it.
The forward/backward seam (where CUDA-graph training capture plugs in)::

    preds = self._forward(imgs)          # graph_capture.forward(imgs) if a capture object is set
                                         # (after graph_capture.maybe_capture(imgs)), else
                                         # self.forward_fn(imgs): model.net(imgs) under autocast
    loss, items = self.criterion(preds, batch)     # eager, may sync
    self.scaler.scale(loss).backward()             # replays a captured backward when present

``graph_capture`` comes from :mod:`.capture` (None unless ``cuda_graph=True`` and nothing
stands against it; its contract is described there). A :class:`~libreyolo.errors.GraphCaptureError`
escaping one of its hooks turns capture off for the rest of the run with one warning (SPEC T-4).

Non-finite losses. Without a gradient scaler (fp32, CPU) the batch is checked on the host and
skipped (every DDP rank skips, or none). With AMP's scaler there is no per-batch host check: a
non-finite loss is made to give non-finite gradients, so the scaler skips that optimizer step on
every rank and lowers its scale; under gradient accumulation this drops the whole accumulation
window the batch belongs to. Either way the epoch's mean losses cover the finite batches only,
and a warning names how many were skipped. Loss items are read back every ``REFRESH_EVERY`` batches.

Classification models (``OUTPUT_KIND == "probs"``) read ImageFolder datasets, default to the
family's ``imgsz`` and ``runs/classify``, and pick best.pt by top-1 accuracy. User callbacks
(:mod:`.callbacks`) run at train start, each epoch's end (before and after validation) and the end.

Outputs (``runs/detect/<name>/``): ``weights/last.pt`` (every epoch, atomic, with the full training state for
``resume``; weights only once all epochs ran), ``weights/best.pt`` (best fitness = 0.1 mAP50 + 0.9 mAP50-95, EMA
weights only), ``results.csv`` (training and validation losses, metrics, stage times), ``results.png``, ``args.yaml``,
TensorBoard events when available and, with ``plots=True``, ``train_batch<i>.png``, ``train_labels.png`` and the
final validation's pictures (:mod:`libreyolo.engine.val_plots`). A kill loses at most the current epoch.
"""

from __future__ import annotations

import contextlib
import dataclasses
import logging
import math
import time
from collections.abc import Callable
from pathlib import Path
from typing import TYPE_CHECKING, Any

import torch
from torch import Tensor

from .. import config as _config
from ..device import autocast
from ..errors import ConfigError, GraphCaptureError
from .bookkeeping import (
    EpochLosses,
    close_mosaic_if_due,
    epoch_row,
    log_run_start,
    loss_row,
    progress_text,
    replan_time_limit,
    run_result,
)
from .callbacks import Callbacks
from .capture import build_train_capture
from .checkpoints import CheckpointMixin
from .config import RESUME_OVERRIDABLE, TrainConfig, resolve_resume, with_family_defaults  # noqa: F401
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
from .plan import FEW_STEPS, plan_steps  # noqa: F401 (FEW_STEPS re-exported)
from .run_dir import after_failure, init_run_dir, run_dir_for
from .seeding import Deterministic, seed_all

if TYPE_CHECKING:
    from ..models._base.family import Family

logger = logging.getLogger(__name__)
# Loss items are read back to the host (progress bar, running means) once every this many batches.
REFRESH_EVERY = 10
# with plots=True, the first epoch's first batches are drawn (train_batch<i>.png)
PLOT_BATCHES = 3


def train(model: Family, overrides: dict[str, Any]) -> dict[str, Any]:
    """``model.train(**overrides)``: returns the best epoch's metrics plus ``save_dir``, ``best``, ``last``.

    More than one device (``device="0,1"``, or ``device="cpu", world_size=2``) outside a torchrun
    world launches DDP through torchrun (:mod:`.launch`); inside one, the trainer joins it.
    """
    from .distributed import in_torchrun_world, parse_devices

    overrides = dict(overrides)  # callbacks are functions, not a config key (not in args.yaml)
    callbacks = Callbacks(overrides.pop("callbacks", None))
    overrides = _config.expand_cfg_file(overrides, TrainConfig.keys(), what="train")  # cfg=file.yaml
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

            if callbacks:
                raise ConfigError("callbacks cannot travel to the processes of a multi-GPU launch: run the "
                                  "script under torchrun (callbacks run on rank 0) or train on one device")

            return launch_training(model, overrides, plan)
    return Trainer(model, cfg, explicit=explicit, callbacks=callbacks).fit()


class Trainer(DataSetupMixin, CheckpointMixin):
    """Train ``model`` (a Family) in place; afterwards ``model.net`` holds the best EMA weights.

    Example:
        >>> Trainer(model, TrainConfig(data="shapes", epochs=1, imgsz=320)).fit()  # doctest: +SKIP
    """

    def __init__(self, model: Family, cfg: TrainConfig, *, explicit: set[str] | None = None,
                 callbacks: Callbacks | None = None) -> None:
        self.model = model
        self.cfg = cfg
        self.explicit = set(explicit or ())
        self.forward_fn: Callable[[Tensor], Any] = self._eager_forward
        self.graph_capture: Any = None
        self.callbacks = callbacks or Callbacks()  # fn(trainer, info) by event, rank 0 only (.callbacks)
        self.start_epoch = 0
        self.epoch = 0
        self.best_fitness = -math.inf
        self.best_metrics: dict[str, float] = {}
        self.last_metrics: dict[str, float] = {}
        self._deterministic = Deterministic()  # global flags of deterministic=True, restored in teardown
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
            if self._loop() and self.is_main:  # all epochs trained: last.pt needs no resume state
                self._strip_last()
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
        result = self._finish()
        if self.is_main:
            self.callbacks.run("on_train_end", self, result)
        return result

    def _after_failure(self, *, interrupted: bool) -> None:
        """A run that stops early (:func:`~libreyolo.training.run_dir.after_failure`): a resume hint,
        or the run folder this run created removed when it holds no checkpoint."""
        if self.is_main and self.save_dir is not None:
            after_failure(self.save_dir, interrupted=interrupted, created=self._made_run_dir,
                          saved_epochs=lambda: getattr(self, "saved_epochs", self.start_epoch),
                          release=self._close_results)

    def _close_results(self) -> None:
        if getattr(self, "results", None) is not None:
            self.results.close()  # release its files (TensorBoard events) before removing the folder
            self.results = None

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
            seed_all(cfg.seed + self.dist.rank)  # per-rank global RNG streams from here on
        save_dir = None
        if self.is_main:  # rank 0 alone creates the run directory; the others learn its name
            save_dir = run_dir_for(cfg, resume_path=self.resume_path if ckpt is not None else None)
            self._made_run_dir = ckpt is None and not save_dir.exists()
            init_run_dir(save_dir, cfg)
        self.save_dir = Path(broadcast_object(str(save_dir), self.dist))
        self.wdir = self.save_dir / "weights"
        self._build_loaders()

        self.criterion = self.model.build_criterion()
        hyp = getattr(self.criterion, "hyp", None)
        if isinstance(hyp, dict):  # only gains the user set: each family keeps its own defaults
            hyp.update({k: getattr(cfg, k) for k in hyp if k in self.explicit and hasattr(cfg, k)})

        nb = len(self.train_loader)
        self.nb = nb
        plan = plan_steps(cfg, net=self.net, nc=self.model.nc, batch=self.batch,
                          world_size=self.dist.world_size if self.dist is not None else 1, nb=nb,
                          explicit=self.explicit, device=self.device,
                          train_state=ckpt["train_state"] if ckpt is not None else None, warn=self.is_main)
        self.accumulate, self.optimizer = plan.accumulate, plan.optimizer
        self.schedule, self.total_steps = plan.schedule, plan.total_steps
        self.amp_dtype = None
        if cfg.amp and self.device.type == "cuda":
            self.amp_dtype = torch.bfloat16 if cfg.amp_dtype == "bfloat16" else torch.float16
        self.scaler = torch.amp.GradScaler("cuda", enabled=self.amp_dtype == torch.float16)
        self.ema = ModelEMA(self.net, decay=cfg.ema_decay, tau=cfg.ema_tau) if cfg.ema else None
        self.last_opt_step = -1
        if ckpt is not None:
            self._load_train_state(ckpt["train_state"])
        self.results = (ResultsLogger(self.save_dir, start_epoch=self.start_epoch, **cfg.logger_kwargs())
                        if self.is_main else None)
        self._setup_graph_capture()
        self._restore_rng()  # a resumed run continues the saved random streams (no-op otherwise)
        log_run_start(self)
        if self.is_main:
            self.callbacks.run("on_train_start", self, self.cfg.to_dict())

    def _seed(self) -> None:
        seed_all(self.cfg.seed)
        if self.cfg.deterministic:
            self._deterministic.enable()

    def _setup_graph_capture(self) -> None:
        if not self.cfg.cuda_graph:
            return
        capture, report = build_train_capture(self.model, net=self.net, device=self.device, amp_dtype=self.amp_dtype,
                                              distributed=self.dist is not None)
        if report is not None:
            self.graph_capture = capture
            self._graph_report = report  # kept after a fallback too: the result says what happened

    # ------------------------------------------------------------------ the loop
    def _eager_forward(self, imgs: Tensor) -> Any:
        with autocast(self.device, self.amp_dtype, cache=True):
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

    def _loop(self) -> bool:
        """The epochs; True when every requested epoch ran (no early stop, no time_limit cut)."""
        t_start, requested = time.perf_counter(), self.cfg.epochs
        epoch = self.start_epoch
        while epoch < self.cfg.epochs:  # cfg.epochs may shrink under time_limit (see _replan)
            cfg = self.cfg
            self.epoch = epoch
            t_epoch = time.perf_counter()
            close_mosaic_if_due(cfg, epoch=epoch, train_ds=self.train_ds, model=self.model, criterion=self.criterion)
            self.train_ds.set_epoch(epoch)
            if self.train_sampler is not None:
                self.train_sampler.set_epoch(epoch)
            losses = self._train_epoch(epoch)
            train_s = time.perf_counter() - t_epoch
            if self.is_main:  # the epoch's mean training losses, named as in results.csv
                self.callbacks.run("on_train_epoch_end", self, loss_row(epoch=epoch, names=self._loss_names(), losses=losses))
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
            row = epoch_row(epoch=epoch, names=self._loss_names(), losses=losses, metrics=metrics,
                            optimizer=self.optimizer, train_s=train_s, n_images=len(self.train_ds))
            row.update(self.stage_seconds)  # time/val_s, time/save_s
            assert self.results is not None  # rank 0
            self.results.log(row)
            self.callbacks.run("on_fit_epoch_end", self, row)
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
        else:
            return self.cfg.epochs >= requested
        return False

    def _replan(self, epoch: int, *, elapsed: float, last_epoch_s: float) -> bool:
        """Fit the run into ``time_limit`` seconds of epoch loop; False = stop now
        (:func:`~libreyolo.training.bookkeeping.replan_time_limit`; ``cfg`` and ``schedule`` follow)."""
        go, self.cfg, self.schedule = replan_time_limit(self.cfg, self.schedule, epoch=epoch, start_epoch=self.start_epoch,
                                                        elapsed=elapsed, last_epoch_s=last_epoch_s)
        return go

    def _loss_names(self) -> tuple[str, ...]:
        return tuple(getattr(self.model, "LOSS_NAMES", ())) or ("loss",)

    def _train_epoch(self, epoch: int) -> Tensor:
        from tqdm import tqdm

        cfg, nb = self.cfg, self.nb
        self.net.train()
        names = self._loss_names()
        # loss items stay on the device, read every REFRESH_EVERY batches: a read per batch stalls launches
        meter = EpochLosses(names)
        host_skipped = 0
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
                # Drop this step's autograd graph now: while an older graph's AccumulateGrad nodes live,
                # a training capture in the next forward fails (stream-capture invalidated).
                del preds, loss
            if step:
                self._optimizer_step()
                self.last_opt_step = ni
            meter.add(items)  # device-side running sums: no host read
            if i % REFRESH_EVERY == 0 or i == nb - 1:
                mloss = meter.report(epoch=epoch, seen=i + 1 - host_skipped)
                if cfg.verbose and self.is_main:
                    bar.set_description(progress_text(epoch=epoch, epochs=cfg.epochs, names=names, mloss=mloss,
                                                      device=self.device, imgs=imgs, batch=batch))
        bar.close()
        self.last_opt_step = nb * (epoch + 1) - 1  # the next epoch opens a new window (even after a skipped batch)
        return meter.final()

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

        net, c = (self.ema.module if self.ema is not None else self.net), self.cfg
        with self.timed("val"):
            return run_validation(model=self.model, net=net, loader=self.val_loader, names=self.model.names,
                                  conf=c.val_conf, iou=c.val_iou, max_det=c.max_det, amp_dtype=self.amp_dtype,
                                  verbose=c.verbose or final, progress=c.verbose, criterion=self.criterion,
                                  loss_names=self._loss_names(), plots_dir=self.save_dir if final and c.plots else None)

    def _plot_batch(self, i: int, batch: dict[str, Any]) -> None:
        """``train_batch<i>.png`` (the augmented batch with its boxes) and, with the first, ``train_labels.png``."""
        if "bboxes" not in batch or self.save_dir is None:  # a classification batch has no boxes to draw
            return
        from ..engine.val_plots import plot_labels, plot_train_batch

        plot_train_batch(batch, self.save_dir / f"train_batch{i}.png", names=self.model.names)
        labels = getattr(self.train_ds, "labels", None)
        if i == 0 and labels is not None:
            plot_labels(labels, self.model.names, self.save_dir / "train_labels.png")

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
        self._deterministic.restore()

    def _finish(self) -> dict[str, Any]:
        from ..io.checkpoint import load_state_into, read_checkpoint

        best = self.wdir / "best.pt"
        src = best if best.is_file() else self.wdir / "last.pt"
        load_state_into(self.model, read_checkpoint(src)["model"], strict=True, where=str(src))
        self.model.net.eval()
        self.model.ckpt_path = str(src)
        self.model.train_args = self.cfg.to_dict()
        return run_result(metrics=self.best_metrics or self.last_metrics, save_dir=self.save_dir, wdir=self.wdir,
                          epochs=self.epoch + 1, dist=self.dist, rank_digests=self.rank_digests,
                          graph_report=getattr(self, "_graph_report", None))

