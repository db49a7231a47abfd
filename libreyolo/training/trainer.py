"""The training loop (DESIGN convention 12: loop + hooks).

The loop owns accumulation, AMP, the optimiser step, EMA updates and the epoch decisions
(validate, best, early stop); it holds the optimisation state (``net``, ``optimizer``, ``scaler``,
``ema``, ``schedule``, ``criterion``) and its counters. The model supplies hooks: ``build_net``
(also used to rebuild the head for a new class count), ``build_criterion``, ``postprocess``
(validation) and, optionally, ``on_close_mosaic(criterion)`` (called once when mosaic is switched
off for the last ``close_mosaic`` epochs). :class:`Trainer` composes parts that own their state:
``data`` (:class:`~.data_setup.DataSetup`: data config, class check and head rebuild, datasets,
loaders), ``checkpointer`` (:class:`~.checkpoints.Checkpointer`: ``weights/``, resume state; the
counters travel as :class:`~.checkpoints.Progress`), ``capture`` (:class:`~.capture.StepCapture`:
the CUDA-graph capture policy and its fallback), ``ddp`` (:class:`~.distributed.Distributed`:
the torchrun world, DDP wrapper, SyncBatchNorm, broadcasts), ``stages``
(:class:`~.bookkeeping.StageTimer`) and ``results`` (:class:`~.loggers.ResultsLogger`), and calls
pure helpers (:mod:`.plan`, :mod:`.bookkeeping`, :mod:`.run_dir`, :mod:`.seeding`). ``__init__``
does nothing; ``fit()`` does it all. The forward/backward seam::

    preds = self._forward(imgs)          # capture.forward(imgs): a live capture's forward, else
                                         # capture.eager(imgs) = model.net(imgs) under autocast
    loss, items = self.criterion(preds, batch)     # eager, may sync
    self.scaler.scale(loss).backward()             # replays a captured backward when present

Non-finite losses. Without a gradient scaler (fp32, CPU) the batch is checked on the host and
skipped (every DDP rank skips, or none). With AMP's scaler there is no per-batch host check: a
non-finite loss is made to give non-finite gradients, so the scaler skips that optimizer step on
every rank and lowers its scale; under gradient accumulation this drops the whole accumulation
window the batch belongs to. Either way the epoch's mean losses cover the finite batches only,
and a warning names how many were skipped. Loss items are read back every ``REFRESH_EVERY`` batches.

Outputs (``runs/detect/<name>/``): ``weights/last.pt`` and ``best.pt`` (:mod:`.checkpoints`; best
fitness = 0.1 mAP50 + 0.9 mAP50-95, top-1 for classifiers), ``results.csv`` / ``.png``, ``args.yaml``,
with ``plots=True`` the first batches, labels and final validation pictures. Callbacks: :mod:`.callbacks`.
"""

from __future__ import annotations

import contextlib
import dataclasses
import logging
import math
import time
from pathlib import Path
from typing import TYPE_CHECKING, Any

import torch
from torch import Tensor

from .. import config as _config
from ..device import autocast
from ..errors import ConfigError
from . import bookkeeping as bk
from .callbacks import Callbacks
from .capture import StepCapture
from .checkpoints import Checkpointer, Progress, open_resume, restore_rng
from .config import (  # noqa: F401
    RESUME_OVERRIDABLE,
    TrainConfig,
    imgsz_multiple,
    resolve_resume,
    with_family_defaults,
)
from .data_setup import DataSetup, task_defaults
from .distributed import Distributed, all_true
from .ema import ModelEMA
from .loggers import ResultsLogger
from .optim import PROBE, OptimizerStep, freeze_modules, hold_frozen_eval, probe_head
from .plan import FEW_STEPS, plan_steps  # noqa: F401 (FEW_STEPS re-exported)
from .run_dir import after_failure, open_run_dir
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
    cfg = TrainConfig.from_overrides(overrides, multiple=imgsz_multiple(model))
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


class Trainer:
    """Train ``model`` (a Family, or a Model wrapping one) in place; afterwards ``model.net`` holds
    the best EMA weights. Its parts and what each owns: the module docstring.

    Example:
        >>> Trainer(model, TrainConfig(data="shapes", epochs=1, imgsz=320)).fit()  # doctest: +SKIP
    """

    def __init__(self, model: Family, cfg: TrainConfig, *, explicit: set[str] | None = None,
                 callbacks: Callbacks | None = None) -> None:
        self.model, self.cfg = model, cfg
        self.explicit = set(explicit or ())
        self.callbacks = callbacks or Callbacks()  # fn(trainer, info) by event, rank 0 only (.callbacks)
        self.capture = StepCapture(eager=self._eager_forward)  # configured in setup() (cuda_graph=True)
        self.ddp = Distributed()  # joins the torchrun world in setup()
        self.data: DataSetup | None = None  # set in setup()
        self.checkpointer: Checkpointer | None = None  # set in setup(), once the optimiser state exists
        self.results: ResultsLogger | None = None  # rank 0, set in setup()
        self.stages = bk.StageTimer()  # time/val_s, time/save_s of the epoch's row
        self.net: torch.nn.Module | None = None  # model.net once set up
        self.train_net: torch.nn.Module | None = None  # what the loop calls: the DDP wrapper under DDP
        self.start_epoch = self.epoch = 0
        self.best_fitness, self.last_opt_step = -math.inf, -1
        self.best_metrics: dict[str, float] = {}
        self.last_metrics: dict[str, float] = {}
        self._deterministic = Deterministic()  # global flags of deterministic=True, restored in teardown
        self.rank_digests: list[str] = []
        self.stale = 0  # epochs since fitness last improved (early stop)
        self.save_dir: Path | None = None
        self._made_run_dir = False  # this run created save_dir (a failure before any checkpoint removes it)

    @property
    def is_main(self) -> bool:
        """Rank 0 of a DDP run, or the only process: validates, saves, logs."""
        return self.ddp.is_main

    @property
    def train_ds(self) -> Any:
        """The training dataset (read by callbacks and benchmarks)."""
        return self.data.train_ds if self.data is not None else None

    # ------------------------------------------------------------------ public
    def fit(self) -> dict[str, Any]:
        try:
            self.setup()
            if self._loop() and self.is_main:  # all epochs trained: last.pt needs no resume state
                self._strip_last()
            self.rank_digests = self.ddp.check_replicas(self.net)  # DDP: replicas agree, rank 0's files complete
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
        if self.checkpointer is not None:  # the last epoch's files first (a write error is logged:
            try:                           # the exception that stopped the run is the one raised)
                self.checkpointer.wait()
            except Exception as e:  # noqa: BLE001
                logger.error("the last checkpoint write failed too: %s", e)
        if self.is_main and self.save_dir is not None:
            after_failure(self.save_dir, interrupted=interrupted, created=self._made_run_dir,
                          saved_epochs=lambda: getattr(self.checkpointer, "saved_epochs", None) or self.start_epoch,
                          release=self._close_results)

    def _close_results(self) -> None:  # before the run folder is removed
        if self.results is not None:
            self.results.close()  # release its files (TensorBoard events) before removing the folder
            self.results = None

    def _task_defaults(self, cfg: TrainConfig) -> TrainConfig:
        """:func:`~.data_setup.task_defaults` for this model and the keys the user gave."""
        return task_defaults(self.model, cfg, self.explicit)

    # ------------------------------------------------------------------ setup
    def setup(self) -> None:
        """Resolve resume, device, data, model head, run dir, loaders, optimiser and state."""
        from ..device import select_device

        if not self.cfg.resume:
            self.cfg = self._task_defaults(self.cfg)
        resume_path, ckpt = None, None
        if self.cfg.resume:
            resume_path, ckpt, self.cfg = open_resume(self.cfg, self.explicit)
        cfg = self.cfg
        if self.model.fused:
            raise ConfigError("this model was fused for inference (fuse()); a fused model cannot train: "
                              "load the checkpoint again without fusing")
        if cfg.freeze == PROBE and getattr(self.model, "OUTPUT_KIND", None) != "probs":
            raise ConfigError(f"freeze='probe' (a linear probe: only the classifier head trains) is for "
                              f"classifiers; {self.model.FAMILY} is not one. Pass module-name prefixes "
                              f"instead, e.g. freeze={next(iter(dict(self.model.net.named_children())), 'backbone')!r}")
        self.ddp = Distributed.join(cfg.device, world_size=cfg.world_size)
        dist = self.ddp.ctx
        self.device = dist.device if dist is not None else select_device(cfg.device)
        seed_all(cfg.seed)  # the same seed on every rank: identical initial weights (DDP also broadcasts rank 0's)
        if cfg.deterministic:
            self._deterministic.enable()
        self.data = DataSetup(self.model, cfg, device=self.device, dist=dist)
        self.data.load()
        self.data.match_classes()
        self.model.imgsz = cfg.imgsz
        self.model.to(self.device)
        if ckpt is not None:
            from ..io.checkpoint import load_state_into

            load_state_into(self.model, ckpt["train_state"]["net"], strict=True, where=str(resume_path))
        if cfg.sync_bn:
            self.ddp.sync_batchnorm(self.model, device=self.device)
        self.net = self.model.net
        # freeze="probe": the head a linear probe trains (the head is rebuilt for the data above)
        self.probe_head = probe_head(self.net) if cfg.freeze == PROBE else None
        if cfg.freeze:  # before DDP wraps the net (its reducer takes the parameters that need gradients then)
            frozen, total = freeze_modules(self.net, cfg.freeze)  # and before the optimizer, which leaves them out
            if self.is_main:
                logger.info("freeze=%s: %s of %s parameters frozen (left out of the optimizer)", cfg.freeze,
                            f"{frozen:,}", f"{total:,}")
        self._train_mode()
        self.train_net = self.ddp.wrap(self.net)
        if dist is not None:
            seed_all(cfg.seed + dist.rank)  # per-rank global RNG streams from here on
        self.save_dir, self._made_run_dir = open_run_dir(cfg, resume_path=resume_path, ddp=self.ddp)
        self.data.build_loaders()
        self.criterion = self.model.build_criterion()
        hyp = getattr(self.criterion, "hyp", None)
        if isinstance(hyp, dict):  # only gains the user set: each family keeps its own defaults
            hyp.update({k: getattr(cfg, k) for k in hyp if k in self.explicit and hasattr(cfg, k)})

        self.nb = nb = len(self.data.train_loader)
        plan = plan_steps(cfg, net=self.net, nc=self.model.nc, batch=self.data.batch,
                          world_size=dist.world_size if dist is not None else 1, nb=nb,
                          explicit=self.explicit, device=self.device,
                          train_state=ckpt["train_state"] if ckpt is not None else None, warn=self.is_main)
        self.accumulate, self.optimizer = plan.accumulate, plan.optimizer
        self.schedule, self.total_steps = plan.schedule, plan.total_steps
        self.amp_dtype = None
        if cfg.amp and self.device.type == "cuda":
            self.amp_dtype = torch.bfloat16 if cfg.amp_dtype == "bfloat16" else torch.float16
        self.scaler = torch.amp.GradScaler("cuda", enabled=self.amp_dtype == torch.float16)
        self.opt_step = OptimizerStep(self.net, self.optimizer, self.scaler, clip_grad=cfg.clip_grad)
        self.ema = ModelEMA(self.net, decay=cfg.ema_decay, tau=cfg.ema_tau) if cfg.ema else None
        self.checkpointer = Checkpointer(self.model, self.save_dir / "weights", net=self.net, ema=self.ema,
                                         optimizer=self.optimizer, scaler=self.scaler, device=self.device,
                                         loader_generator=getattr(self.data.train_loader, "generator", None))
        if ckpt is not None:
            p = self.checkpointer.restore(ckpt["train_state"])
            self.start_epoch, self.best_fitness, self.best_metrics = p.epoch + 1, p.best_fitness, p.best_metrics
            self.last_opt_step, self.stale = p.last_opt_step, p.stale
        self.results = (ResultsLogger(self.save_dir, start_epoch=self.start_epoch, **cfg.logger_kwargs())
                        if self.is_main else None)
        if cfg.cuda_graph:
            ms = self.data.multi_scale
            self.capture.enable(self.model, net=self.net, device=self.device, amp_dtype=self.amp_dtype,
                                distributed=dist is not None, sizes=len(ms.buckets) if ms is not None else 1)
        if ckpt is not None:  # a resumed run continues the saved random streams
            restore_rng(ckpt["train_state"].get("rng"), loader_generator=self.checkpointer.loader_generator,
                        distributed=dist is not None, device=self.device)
        bk.log_run_start(self)
        if self.is_main:
            self.callbacks.run("on_train_start", self, self.cfg.to_dict())

    # ------------------------------------------------------------------ the loop
    def _eager_forward(self, imgs: Tensor) -> Any:
        with autocast(self.device, self.amp_dtype, cache=True):
            return self.train_net(imgs)

    def _forward(self, imgs: Tensor) -> Any:
        return self.capture.forward(imgs)

    def _zero_grad(self) -> None:
        """Zero gradients; a live training graph needs it done in place (SPEC T-7)."""
        self.capture.zero_grad(self.optimizer)

    def _loop(self) -> bool:
        """The epochs; True when every requested epoch ran (no early stop, no time_limit cut)."""
        t_start, requested = time.perf_counter(), self.cfg.epochs
        epoch = self.start_epoch
        while epoch < self.cfg.epochs:  # cfg.epochs may shrink under time_limit (see _replan)
            cfg = self.cfg
            self.epoch = epoch
            t_epoch = time.perf_counter()
            data = self.data
            bk.close_mosaic_if_due(cfg, epoch=epoch, train_ds=data.train_ds, model=self.model, criterion=self.criterion)
            data.train_ds.set_epoch(epoch)
            if data.train_sampler is not None:
                data.train_sampler.set_epoch(epoch)
            losses = self._train_epoch(epoch)
            train_s = time.perf_counter() - t_epoch
            if self.is_main:  # the epoch's mean training losses, named as in results.csv
                self.callbacks.run("on_train_epoch_end", self, bk.loss_row(epoch=epoch, names=self._loss_names(), losses=losses))
            if not self.is_main:  # rank 0 validates, saves and logs; the others wait for its decision
                stop, epochs = self.ddp.broadcast(None)
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
            row = bk.epoch_row(epoch=epoch, names=self._loss_names(), losses=losses, metrics=metrics,
                               metric_keys=data.task.metric_keys, optimizer=self.optimizer, train_s=train_s,
                               n_images=len(data.train_ds))
            row.update(self.stages.seconds)  # time/val_s, time/save_s
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
            self.ddp.broadcast((stop, self.cfg.epochs))
            if stop:
                break
            epoch += 1
        else:
            return self.cfg.epochs >= requested
        return False

    def _replan(self, epoch: int, *, elapsed: float, last_epoch_s: float) -> bool:
        """Fit the run into ``time_limit`` seconds of epoch loop; False = stop now
        (:func:`~libreyolo.training.bookkeeping.replan_time_limit`; ``cfg`` and ``schedule`` follow)."""
        go, self.cfg, self.schedule = bk.replan_time_limit(self.cfg, self.schedule, epoch=epoch, start_epoch=self.start_epoch,
                                                           elapsed=elapsed, last_epoch_s=last_epoch_s)
        return go

    def _loss_names(self) -> tuple[str, ...]:
        return tuple(getattr(self.model, "LOSS_NAMES", ())) or ("loss",)

    def _train_mode(self) -> None:
        """``net.train()``; in a linear probe the frozen features stay in eval mode."""
        self.net.train()
        if self.probe_head is not None:
            hold_frozen_eval(self.net, self.probe_head)

    def _train_epoch(self, epoch: int) -> Tensor:
        from tqdm import tqdm

        cfg, nb = self.cfg, self.nb
        self._train_mode()
        names = self._loss_names()
        # loss items stay on the device, read every REFRESH_EVERY batches: a read per batch stalls launches
        meter = bk.EpochLosses(names)
        host_skipped = 0
        bar = tqdm(enumerate(self.data.train_loader), total=nb, disable=not (cfg.verbose and self.is_main),
                   dynamic_ncols=True,
                   desc=f"{epoch + 1}/{cfg.epochs}", leave=True)
        ddp = self.ddp.ctx
        # With a gradient scaler a non-finite loss needs no host check: its gradients are
        # non-finite too (all-reduced to every rank under DDP), so the scaler skips that optimizer
        # step on every process. Without one, the batch is skipped here (one host sync per batch).
        check_on_host = not self.scaler.is_enabled()
        for i, batch in bar:
            ni = i + nb * epoch
            self.schedule.apply(self.optimizer, iteration=ni, epoch=epoch)
            if i < PLOT_BATCHES and epoch == self.start_epoch and cfg.plots and self.is_main:
                self.data.plot_batch(i, batch, self.save_dir)
            imgs = batch["img"].to(self.device, non_blocking=True).float().div_(255.0)
            if self.data.multi_scale is not None:  # one of a few fixed sizes (.scales); boxes are normalised
                imgs = self.data.multi_scale(imgs, epoch=epoch, i=i)
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
                if step and ddp is not None and self.capture.bypassed:  # the forward skipped DDP's hooks
                    self.ddp.reduce_gradients(self.net)  # (a captured step): average here, outside the graph
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
                    bar.set_description(bk.progress_text(epoch=epoch, epochs=cfg.epochs, names=names, mloss=mloss,
                                                         device=self.device, imgs=imgs, batch=batch))
        bar.close()
        self.last_opt_step = nb * (epoch + 1) - 1  # the next epoch opens a new window (even after a skipped batch)
        return meter.final()

    def _optimizer_step(self) -> None:
        self.opt_step()  # unscale, clip, step, scaler update (.optim.OptimizerStep)
        self._zero_grad()
        if self.ema is not None:
            self.ema.update(self.net)

    def _validate(self, *, final: bool) -> dict[str, float]:
        if self.data.val_loader is None:
            return {}
        from ..engine.validator import run_validation

        net, c = (self.ema.module if self.ema is not None else self.net), self.cfg
        with self.stages.timed("val"):
            return run_validation(model=self.model, net=net, loader=self.data.val_loader, names=self.model.names,
                                  conf=c.val_conf, iou=c.val_iou, max_det=c.max_det, amp_dtype=self.amp_dtype,
                                  verbose=c.verbose or final, progress=c.verbose, criterion=self.criterion,
                                  loss_names=self._loss_names(), plots_dir=self.save_dir if final and c.plots else None)

    # ------------------------------------------------------------------ checkpoints
    def _save(self, epoch: int, metrics: dict[str, float], *, best: bool) -> None:
        """The epoch's checkpoints (:meth:`.Checkpointer.save`), timed as ``time/save_s``."""
        progress = Progress(epoch=epoch, best_fitness=self.best_fitness, best_metrics=self.best_metrics,
                            last_opt_step=self.last_opt_step, stale=self.stale)
        with self.stages.timed("save"):
            self.checkpointer.save(self.cfg, metrics, progress, best=best)  # type: ignore[union-attr]

    def _strip_last(self) -> None:
        """All epochs trained: ``last.pt`` keeps the final weights only (:meth:`.Checkpointer.strip_last`)."""
        self.checkpointer.strip_last(self.cfg, self.epoch, self.last_metrics)  # type: ignore[union-attr]

    # ------------------------------------------------------------------ end
    def teardown(self) -> None:
        """Finish the checkpoint write; release loaders, loggers and the process group (also after an
        exception or KeyboardInterrupt)."""
        if self.checkpointer is not None:
            try:
                self.checkpointer.close()
            finally:
                self._teardown_rest()
        else:
            self._teardown_rest()

    def _teardown_rest(self) -> None:
        if self.data is not None:
            self.data.close()
        if self.results is not None:
            self.results.close()
        if self.train_net is not None:
            self.train_net = self.net  # drop the DDP wrapper (and its communication buffers)
        if self.ddp.plain_batchnorm(self.model):  # SyncBatchNorm back to BatchNorm2d
            self.net = self.model.net
        self.ddp.close()
        self._deterministic.restore()

    def _finish(self) -> dict[str, Any]:
        assert self.checkpointer is not None  # set up
        self.checkpointer.load_final()
        self.model.train_args = self.cfg.to_dict()
        return bk.run_result(metrics=self.best_metrics or self.last_metrics, save_dir=self.save_dir,
                             wdir=self.checkpointer.wdir,
                          epochs=self.epoch + 1, dist=self.ddp.ctx, rank_digests=self.rank_digests,
                          graph_report=self.capture.report)
