"""Data set-up of the trainer: task defaults, datasets, class-count matching, loaders.

:func:`task_defaults` adjusts the config before anything else; :class:`DataSetup` is the trainer's
part that loads the data config, matches the model's classes to it (rebuilding the head) and
builds the datasets and loaders through the model's task (:mod:`libreyolo.tasks`): detection reads
YOLO datasets (:mod:`libreyolo.data.dataset`), classification ImageFolder datasets
(:mod:`libreyolo.data.classify`). ``single_cls`` trains detection as one class (labels collapse
to 0, a one-class head); ``fraction`` keeps the first share of the sorted training images. Under
DDP the total ``batch`` is split over the processes and a
:class:`~torch.utils.data.DistributedSampler` gives each a disjoint slice. ``rect=True`` trains on
rectangular batches of aspect-sorted images (:mod:`libreyolo.data.batching`: a
:class:`~libreyolo.data.batching.RectBatchSampler` shuffles whole batches, split over the DDP
ranks) and validates on rectangular items; ``multi_scale=f`` builds :attr:`DataSetup.multi_scale`
(:class:`~.scales.MultiScale`), which the loop applies to each batch on the device.
"""

from __future__ import annotations

import dataclasses
import logging
from pathlib import Path
from typing import TYPE_CHECKING, Any

from ..errors import ConfigError
from .config import TrainConfig
from .distributed import DistContext, barrier

if TYPE_CHECKING:
    import torch

    from ..models._base.family import Family

logger = logging.getLogger(__name__)


def task_defaults(model: Family, cfg: TrainConfig, explicit: set[str]) -> TrainConfig:
    """The keys the model's task sets when the user did not (a classifier: ``imgsz`` the family's
    224, ``project`` runs/classify)."""
    from ..tasks import task_of

    changes = task_of(model).train_defaults(int(model.DEFAULT_IMGSZ), cfg, explicit)
    return dataclasses.replace(cfg, **changes) if changes else cfg


def _default_arch(model: Any, key: str) -> Any:
    """The value of architecture option ``key`` a model has when its ``arch`` leaves it out (the
    attribute of that name on the model, else ``None``)."""
    return getattr(model, key, None)


def _shapes(net: torch.nn.Module) -> dict[str, tuple[int, ...]]:
    return {k: tuple(v.shape) for k, v in net.state_dict().items()}


def _built_shapes(model: Family, arch: dict[str, Any]) -> tuple[type, dict[str, tuple[int, ...]]]:
    """(class, parameter shapes) of the family's own build of ``model``'s size, class count and
    ``arch`` (on the meta device: no memory; on the CPU where a build needs data)."""
    import torch

    try:
        with torch.device("meta"):
            ref = model.build_net(size=model.size, nc=model.nc, task=model.task, **arch)
    except Exception:  # noqa: BLE001 - a build that reads tensor data (SegFormer) cannot run on meta
        ref = model.build_net(size=model.size, nc=model.nc, task=model.task, **arch)
    return type(ref), _shapes(ref)


def _rebuilt_net(model: Family, *, nc: int, arch: dict[str, Any], want: dict[str, Any]) -> tuple[Any, str | None]:
    """(``model``'s network rebuilt for ``nc`` classes and the ``want`` architecture options, the
    class name of a custom network or ``None``).

    A network that is the family's build of its size (same class, parameter names and shapes) is
    built again by the family. Any other (a narrower config, another width, set as ``model.net``)
    is rebuilt by its own class from its constructor arguments, each read from the attribute of
    the same name (``EncoderDecoderDetector(cfg=..., nc=...)``), after checking that they give back
    the network as it is; a network they do not describe is refused (the family's full-size build
    would silently replace it)."""
    import inspect

    import torch

    net = model.net
    kind, shapes = _built_shapes(model, arch)
    if type(net) is kind and _shapes(net) == shapes:
        return model.build_net(size=model.size, nc=nc, task=model.task, **{**arch, **want}), None
    cls = type(net)
    params = {p.name for p in inspect.signature(cls.__init__).parameters.values()
              if p.name != "self" and p.kind not in (p.VAR_POSITIONAL, p.VAR_KEYWORD)}
    refuse = ConfigError(f"the model's network is a custom {cls.__name__}, not the built-in {model.FAMILY}-"
                         f"{model.size}, and its constructor arguments are not all attributes of it, so it cannot "
                         f"be rebuilt with {nc} classes; build it with nc={nc} before training")
    if "nc" not in params or not all(hasattr(net, k) for k in params - {"nc"}) or not set(want) <= params:
        raise refuse
    kw = {k: getattr(net, k) for k in params - {"nc"}}
    try:
        with torch.device("meta"):
            same = _shapes(cls(**kw, nc=model.nc)) == _shapes(net)
        rebuilt = cls(**{**kw, **want}, nc=nc) if same else None
    except Exception as e:  # noqa: BLE001 - an attribute that is not the constructor argument
        raise refuse from e
    if rebuilt is None:
        raise refuse
    return rebuilt, cls.__name__


class DataSetup:
    """Datasets and loaders of one run (see the module docstring).

    Constructed with the model (its head is rebuilt for the data's class count), the run's config
    (as resolved at set-up: a ``time_limit`` re-plan changes only ``epochs``, which this never reads),
    the training ``device`` and this process's :class:`~.distributed.DistContext` (None: one
    process). Owns :attr:`config` (the loaded data config: image lists, ``nc``, ``names``),
    :attr:`train_ds` / :attr:`val_ds`, :attr:`train_loader` / :attr:`val_loader`,
    :attr:`train_sampler` (DDP) and :attr:`batch` (per process). Steps, in this order:
    :meth:`load`, :meth:`match_classes`, :meth:`build_loaders`; :meth:`close` drops the loaders.
    """

    def __init__(self, model: Family, cfg: TrainConfig, *, device: torch.device, dist: DistContext | None) -> None:
        self.model, self.cfg, self.device, self.dist = model, cfg, device, dist
        from ..tasks import task_of

        self.task = task_of(model)
        self.config: Any = None
        self.train_ds: Any = None
        self.val_ds: Any = None
        self.train_loader: Any = None
        self.val_loader: Any = None
        self.train_sampler: Any = None
        self.multi_scale: Any = None  # a MultiScale with multi_scale > 0 (set in build_loaders)
        self.batch = cfg.batch

    @property
    def is_main(self) -> bool:
        return self.dist is None or self.dist.is_main

    def load(self) -> None:
        """Read the data config ``cfg.data`` (the task's layout: YOLO, COCO JSON, ImageFolder)."""
        self.config = self.task.load_data(self.cfg.data)

    def match_classes(self) -> None:
        """Rebuild the head when the dataset's class count differs (matching weights are kept)."""
        m, d = self.model, self.config
        nc, names = d.nc, dict(d.names)
        self.task.check_train_options(self.cfg)
        if self.cfg.single_cls:  # every label becomes class 0 (the datasets collapse them)
            nc, names = 1, {0: names[0] if d.nc == 1 else "object"}
        arch = dict(getattr(m, "arch", {}))
        want = self.task.data_arch(d)  # e.g. a pose dataset's keypoint count
        changed = {k: v for k, v in want.items() if arch.get(k, _default_arch(m, k)) != v}
        if not (nc != m.nc or changed):
            m.names = names
            return
        new, own = _rebuilt_net(m, nc=nc, arch=arch, want=want)
        net = f"{m.FAMILY}-{m.size}" if own is None else f"its own {own} network (not the built-in {m.FAMILY}-{m.size})"
        if nc == m.nc:
            logger.warning("%s asks %s of the model: rebuilding %s and keeping every weight of matching shape",
                           self.cfg.data, changed, net)
        else:
            logger.warning("the model has %d classes but %s has %d%s: rebuilding %s with %d classes and keeping "
                           "every weight of matching shape", m.nc, self.cfg.data, nc,
                           " (single_cls)" if self.cfg.single_cls else "", net, nc)
        own_sd = new.state_dict()
        keep = {k: v for k, v in m.net.state_dict().items() if k in own_sd and own_sd[k].shape == v.shape}
        new.load_state_dict(keep, strict=False)
        m.net, m.nc = new, nc
        m.names = names

    def _split_batch(self) -> None:
        """``self.batch`` (per process) and ``self.train_sampler`` from the total ``cfg.batch``.

        Under DDP ``batch`` is the total over all ranks. Augmentation is a function of (seed, epoch,
        image index) and each rank draws other indices, so every rank keeps the same dataset seed.
        """
        cfg = self.cfg
        self.batch, self.train_sampler = cfg.batch, None
        if self.dist is None:
            return
        from torch.utils.data import DistributedSampler

        ws = self.dist.world_size
        if cfg.batch < ws:
            raise ConfigError(f"batch={cfg.batch} is the total batch over {ws} DDP processes and must be "
                              f">= {ws}; use batch={ws * max(cfg.batch, 1)} or more")
        self.batch = cfg.batch // ws
        if cfg.batch % ws:
            logger.warning("batch=%d is not a multiple of the %d DDP processes: using %d per process (%d total)",
                           cfg.batch, ws, self.batch, self.batch * ws)
        self.train_sampler = DistributedSampler(self.train_ds, num_replicas=ws, rank=self.dist.rank,
                                                shuffle=True, seed=cfg.seed, drop_last=False)

    def workers(self) -> int:
        """``cfg.workers`` capped at the CPU cores this process may use (shared by the DDP processes
        of this host); said once when the cap applies. Results do not depend on the worker count
        (augmentation is a function of seed, epoch and image index)."""
        import os

        want = self.cfg.workers
        try:
            cores = len(os.sched_getaffinity(0))
        except AttributeError:  # not Linux
            cores = os.cpu_count() or 1
        local = int(os.environ.get("LOCAL_WORLD_SIZE", "1") or 1) if self.dist is not None else 1
        cap = max(cores // max(local, 1), 1)
        if want > cap:
            if self.is_main:
                logger.info("workers=%d capped at %d (%d CPU core%s%s)", want, cap, cores, "" if cores == 1 else "s",
                            f" shared by {local} processes" if local > 1 else "")
            return cap
        return want

    def _train_files(self, files: list[Any]) -> list[Any]:
        """The first ``fraction`` of the (sorted) training images, at least one: the same subset every run."""
        if self.cfg.fraction >= 1:
            return files
        n = max(round(len(files) * self.cfg.fraction), 1)
        if self.is_main:
            logger.info("fraction=%g: training on the first %d of %d images", self.cfg.fraction, n, len(files))
        return files[:n]

    def build_loaders(self) -> None:
        """The training loader and, on the main process, the validation loader (its batches kept in
        host memory after the first validation when the set is small: :class:`~..data.loader.BatchCache`)."""
        from ..data.loader import BatchCache, build_dataloader

        cfg, d, task = self.cfg, self.config, self.task
        pin = self.device.type == "cuda"
        workers = self.workers()
        scan = task.scans_labels and self.dist is not None
        if scan and not self.is_main:  # rank 0 scans the labels and writes the cache first; the others read it
            barrier(self.dist)
        train_files = self._train_files(d.train)
        self.train_ds = task.dataset(d, train_files, split="train", imgsz=cfg.imgsz, augment=True, train_cfg=cfg)
        if scan and self.is_main:
            barrier(self.dist)
        self._split_batch()
        if cfg.rect:
            self.train_loader = self._rect_loader(workers=workers, pin=pin)
        else:
            drop = task.drop_partial_batch and len(self.train_ds) > self.batch
            self.train_loader = build_dataloader(self.train_ds, batch=self.batch, workers=workers, shuffle=True,
                                                 seed=cfg.seed, pin_memory=pin, sampler=self.train_sampler,
                                                 drop_last=drop, collate_fn=task.collate)
        if cfg.multi_scale:
            from .config import imgsz_multiple
            from .scales import MultiScale

            self.multi_scale = MultiScale(imgsz=cfg.imgsz, fraction=cfg.multi_scale, seed=cfg.seed,
                                          stride=imgsz_multiple(self.model))
            if self.is_main:
                logger.info("multi_scale=%g: each batch trains at one of %s px (seeded per batch)", cfg.multi_scale,
                            ", ".join(map(str, self.multi_scale.buckets)))
        self.val_loader = None
        if cfg.val and self.is_main:  # rank 0 validates on the whole val set
            self.val_ds = task.dataset(d, d.val, split="val", imgsz=cfg.imgsz, train_cfg=cfg)
            self.val_loader = BatchCache(build_dataloader(self.val_ds, batch=cfg.batch * 2, workers=workers,
                                                          shuffle=False, seed=cfg.seed, pin_memory=pin,
                                                          collate_fn=task.collate))

    def _rect_loader(self, *, workers: int, pin: bool) -> Any:
        """``rect=True``: the training loader over whole aspect-sorted batches (its batch sampler
        becomes :attr:`train_sampler`, so the loop sets its epoch; under DDP it splits the batches)."""
        from ..data.batching import RectBatchSampler
        from ..data.loader import build_dataloader

        cfg, ds = self.cfg, self.train_ds
        if not getattr(ds, "rect", False) or not hasattr(ds, "set_batch_shapes"):
            raise ConfigError(f"rect=True needs a dataset with rectangular batches; {type(ds).__name__} has none")
        ds.set_batch_shapes(self.batch)
        if self.is_main and cfg.mosaic > 0:
            logger.info("rect=True: mosaic=%g%s off (rectangular batches letterbox single images)", cfg.mosaic,
                        " and mixup" if cfg.mixup > 0 else "")
        rank, ws = (self.dist.rank, self.dist.world_size) if self.dist is not None else (0, 1)
        self.train_sampler = RectBatchSampler(len(ds), batch=self.batch, shuffle=True, seed=cfg.seed, rank=rank,
                                              world_size=ws)
        return build_dataloader(ds, batch=self.batch, workers=workers, shuffle=True, seed=cfg.seed, pin_memory=pin,
                                batch_sampler=self.train_sampler, collate_fn=self.task.collate)

    def plot_batch(self, i: int, batch: dict[str, Any], save_dir: Path | None) -> None:
        """``train_batch<i>.png`` (the augmented batch with its boxes) and, with the first, ``train_labels.png``."""
        if not self.task.plots or save_dir is None:  # e.g. a classification batch has no boxes to draw
            return
        from ..engine.val_plots import plot_labels, plot_train_batch

        plot_train_batch(batch, save_dir / f"train_batch{i}.png", names=self.model.names,
                         skeleton=(getattr(self.model, "arch", None) or {}).get("skeleton"))
        labels = getattr(self.train_ds, "labels", None)
        if i == 0 and labels is not None:
            plot_labels(labels, self.model.names, save_dir / "train_labels.png")

    def close(self) -> None:
        """Drop the loaders (their worker processes end); the datasets stay readable."""
        self.train_loader = self.val_loader = None
