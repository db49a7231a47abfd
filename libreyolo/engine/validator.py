"""Validation: ``model.val(...)`` on a dataset split, and the loop the trainer scores its EMA with.

The loop is the same for every task: batches of the split through the network, the task's
outputs (:meth:`~libreyolo.tasks.base.Task.val_outputs`) into the task's scorer
(:meth:`~libreyolo.tasks.base.Task.scorer`). Detection is scored by COCO mAP50-95 / mAP50 in
original image pixels plus precision and recall (:mod:`libreyolo.tasks.detect.scoring`, a
:class:`~libreyolo.tasks.detect.results.DetMetrics`); classification by top-1 / top-5
(:mod:`libreyolo.tasks.classify.scoring`). ``plots`` writes the pictures of
:mod:`libreyolo.engine.val_plots` for a task that has them.
"""

from __future__ import annotations

import dataclasses
import logging
import os
import time
import typing
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any, Literal

import numpy as np
import torch
from torch import Tensor

from ..device import autocast
from ..errors import ConfigError, check_keys, empty_value
from ..tasks import task_of
from ..tasks.detect.scoring import fitness  # noqa: F401 - re-exported: what training picks best.pt by

if TYPE_CHECKING:
    from ..models._base.family import Family

logger = logging.getLogger(__name__)
LossFn = Callable[[Any, dict[str, Any]], tuple[Tensor, Tensor]]  # criterion(raw, batch) -> (loss, items)


@dataclass(frozen=True, kw_only=True)
class ValConfig:
    """Keys accepted by ``model.val(**overrides)``."""

    cfg: str | None = None  # a YAML file of val keys (keys given directly override it)
    data: str | None = None
    batch: int = 16
    imgsz: int | None = None
    conf: float = 0.001
    iou: float = 0.7
    max_det: int = 300
    device: str | None = None
    split: Literal["val", "train", "test"] = "val"
    half: bool = False
    workers: int = 4
    verbose: bool = True
    plots: bool = False  # write the pictures of libreyolo.engine.val_plots into project/name
    project: str | None = dataclasses.field(default=None, metadata={"help": "plots folder parent (runs/detect)"})
    name: str = dataclasses.field(default="val", metadata={"help": "plots folder name (val, val2, ...)"})
    exist_ok: bool = dataclasses.field(default=False, metadata={"help": "write into an existing plots folder"})

    @classmethod
    def from_overrides(cls, overrides: dict[str, Any]) -> ValConfig:
        from ..config import coerce as _coerce

        names = [f.name for f in dataclasses.fields(cls)]
        check_keys(overrides, names, what="val")
        hints = typing.get_type_hints(cls)
        cfg = cls(**{k: _coerce(k, v, hints[k]) for k, v in overrides.items()})
        for key in ("conf", "iou"):
            if not 0.0 <= getattr(cfg, key) <= 1.0:
                raise ConfigError(f"{key} must be in [0, 1], got {getattr(cfg, key)}")
        if cfg.batch < 1 or cfg.max_det < 1 or cfg.workers < 0:
            raise ConfigError("batch and max_det must be >= 1 and workers >= 0")
        return cfg


def available_cpus() -> int:
    """CPUs this process may run on (its affinity mask where the OS has one)."""
    try:
        return max(len(os.sched_getaffinity(0)), 1)
    except AttributeError:  # macOS, Windows
        return max(os.cpu_count() or 1, 1)


def capped_workers(workers: int, *, explicit: bool) -> int:
    """``workers`` data-loading processes, at most one per available CPU (an INFO line when an
    explicit value is lowered)."""
    cpus = available_cpus()
    if workers > cpus:
        if explicit:
            logger.info("val: workers=%d lowered to %d, the number of CPUs available", workers, cpus)
        return cpus
    return workers


def validate(model: Family, overrides: dict[str, Any]) -> dict[str, float]:
    """Validate ``model`` on a dataset split.

    A detector returns a :class:`~libreyolo.tasks.detect.results.DetMetrics`: a dict of mAP50-95,
    mAP50, precision, recall, fitness, images, instances, ms_per_image, with per-class numbers,
    ``maps``, the confusion matrix, ``speed``, ``save_dir``, ``summary()`` and ``to_json()``
    attached. A classifier returns a dict of top1, top5, fitness, images, ms_per_image. With
    ``verbose`` the per-class table is logged and shown on stderr when logging is unconfigured
    (:mod:`libreyolo.engine.val_logging`); ``plots=True`` writes the pictures into
    ``project/name`` (``runs/detect/val``, then ``val2``, ... unless ``exist_ok``).

    Example:
        >>> metrics = LibreYOLO("LibreYOLO9t.pt").val(data="shapes", imgsz=320, plots=True)  # doctest: +SKIP
        >>> metrics["mAP50-95"], metrics.save_dir  # doctest: +SKIP
    """
    from ..config import expand_cfg_file
    from .val_logging import library_logging

    overrides = expand_cfg_file(dict(overrides), [f.name for f in dataclasses.fields(ValConfig)], what="val")
    cfg = ValConfig.from_overrides(overrides)
    with library_logging(cfg.verbose):
        return _validate(model, cfg, overrides)


def _validate(model: Family, cfg: ValConfig, overrides: dict[str, Any]) -> dict[str, float]:
    from ..data.loader import build_dataloader
    from ..models._base.family import select_device

    if cfg.data is not None and not str(cfg.data).strip():
        raise empty_value("data")
    data = cfg.data or model.train_args.get("data")
    if not data:
        raise ConfigError("val needs a dataset: pass data='my-dataset.yaml' (or data='shapes')")
    task = task_of(model)
    dcfg: Any = task.load_data(str(data))
    if dcfg.nc != model.nc:
        raise ConfigError(f"the model predicts {model.nc} classes but {data!r} has {dcfg.nc}; "
                          "validate on the dataset the model was trained for")
    if cfg.plots and not task.plots:
        logger.warning("val: plots=True draws detection pictures; a %s model gets none", task.name)
    imgsz = int(cfg.imgsz or model.imgsz)
    if imgsz % model.stride:
        raise ConfigError(f"imgsz must be a multiple of {model.stride}, got {imgsz}")
    device = select_device(cfg.device) if cfg.device is not None else model.device
    model.to(device)
    workers = capped_workers(cfg.workers, explicit="workers" in overrides)
    amp = (torch.float16 if device.type == "cuda" else torch.bfloat16) if cfg.half else None
    files = list(getattr(dcfg, cfg.split, None) or [])
    if not files:
        raise ConfigError(f"split={cfg.split!r}: {data!r} has no {cfg.split} images (add a '{cfg.split}' key "
                          "to the dataset yaml)")
    ds = task.dataset(dcfg, files, split=cfg.split, imgsz=imgsz)
    loader = build_dataloader(ds, batch=cfg.batch, workers=workers, shuffle=False, seed=0,
                              pin_memory=device.type == "cuda", collate_fn=task.collate)
    plots_dir = None
    if cfg.plots and task.plots:
        plots_dir = increment_dir(Path(cfg.project or task.project) / cfg.name, exist_ok=cfg.exist_ok)
        plots_dir.mkdir(parents=True, exist_ok=True)
    return run_validation(model=model, net=model.net, loader=loader, names=dcfg.names, conf=cfg.conf, iou=cfg.iou,
                          max_det=cfg.max_det, amp_dtype=amp, verbose=cfg.verbose, progress=cfg.verbose,
                          plots_dir=plots_dir)


def increment_dir(path: Path, *, exist_ok: bool) -> Path:
    """``runs/detect/val`` (or ``.../train``) -> the first of val, val2, val3, ... that does not exist
    (``path`` itself with ``exist_ok``); the run folders of ``val`` and ``train`` alike."""
    if exist_ok or not path.exists():
        return path
    n = 2
    while (path.parent / f"{path.name}{n}").exists():
        n += 1
    return path.parent / f"{path.name}{n}"


def run_validation(*, model: Family, net: torch.nn.Module, loader: Iterable[dict[str, Any]], names: dict[int, str],
                   conf: float = 0.001, iou: float = 0.7, max_det: int = 300, amp_dtype: torch.dtype | None = None,
                   verbose: bool = True, progress: bool = True, criterion: LossFn | None = None,
                   loss_names: Sequence[str] = (), plots_dir: Path | None = None,
                   plot_batches: int = 3) -> dict[str, float]:
    """Run ``net`` (e.g. the EMA copy during training) over ``loader`` and score it.

    ``model.postprocess`` decodes the raw outputs; it reads only the head's structure, so any net
    of the same architecture may be passed. The model's task scores them: a detector returns a
    :class:`~libreyolo.tasks.detect.results.DetMetrics` (a dict), a classifier a plain dict of
    top1 / top5 (:mod:`libreyolo.tasks.classify.scoring`).

    ``criterion`` (``criterion(raw, batch) -> (loss, items Tensor[len(loss_names)])``, the
    training loss): when given and :func:`val_loss_supported`, the mean ``items`` over the split
    become ``DetMetrics.losses`` (keyed by ``loss_names``). ``plots_dir``: write the pictures of
    :mod:`libreyolo.engine.val_plots` there (``plot_batches`` batches of predictions next to labels).
    """
    from tqdm import tqdm

    task = task_of(model)
    device = next(net.parameters()).device
    if not task.val_losses:
        criterion = None
    if criterion is not None and not val_loss_supported(model):
        logger.debug("val: no validation losses (the training forward of %s is split in stages)",
                     getattr(model, "FAMILY", "this family"))
        criterion = None
    restore = _eval_mode(net)
    scorer = task.scorer(names)
    t_pre = t_inf = t_post = 0.0
    n_img = 0
    loss_sum: Tensor | None = None
    n_loss = 0
    shown: list[tuple[np.ndarray, dict[str, np.ndarray], list[np.ndarray]]] = []
    bar = tqdm(loader, desc="val", leave=False, disable=not progress, dynamic_ncols=True)
    # no_grad (not inference_mode) when the criterion runs: tensors it caches (anchors) stay usable in training
    grad_ctx = torch.no_grad() if criterion is not None else torch.inference_mode()
    sync = (lambda: torch.cuda.synchronize(device)) if device.type == "cuda" else (lambda: None)
    try:
        with grad_ctx:
            for bi, batch in enumerate(bar):
                t0 = time.perf_counter()
                imgs = batch["img"].to(device, non_blocking=True).float().div_(255.0)
                sync()
                t1 = time.perf_counter()
                with autocast(device, amp_dtype, cache=True):
                    raw = net(imgs)
                sync()
                t2 = time.perf_counter()
                dets = task.val_outputs(model, raw, conf=conf, iou=iou, max_det=max_det)
                sync()
                t3 = time.perf_counter()
                t_pre, t_inf, t_post = t_pre + t1 - t0, t_inf + t2 - t1, t_post + t3 - t2
                n_img += imgs.shape[0]
                if criterion is not None:
                    _, items = criterion(raw, batch)
                    items = items.detach().float().reshape(-1)
                    if bool(torch.isfinite(items).all()):
                        loss_sum = items if loss_sum is None else loss_sum + items
                        n_loss += 1
                scorer.add(batch, dets, input_hw=tuple(imgs.shape[2:]))
                if plots_dir is not None and task.plots and bi < plot_batches:
                    shown.append((_to_numpy(batch["img"]), {k: _to_numpy(batch[k]) for k in ("batch_idx", "cls",
                                                                                               "bboxes", "keypoints")
                                                            if k in batch},
                                  [task.plot_rows(d) for d in dets]))
    finally:
        restore()
    ms = 1000 / max(n_img, 1)
    losses: dict[str, float] = {}
    if loss_sum is not None:
        keys = list(loss_names) or [f"loss{i}" for i in range(loss_sum.numel())]
        losses = {k: float(v) / n_loss for k, v in zip(keys, loss_sum.cpu().tolist(), strict=False)}
    metrics = scorer.result(images=n_img, speed={"preprocess": t_pre * ms, "inference": t_inf * ms,
                                                 "postprocess": t_post * ms},
                            ms_per_image=(t_inf + t_post) * ms, losses=losses,
                            save_dir=Path(plots_dir) if plots_dir is not None else None)
    if verbose:
        logger.info("\n%s", scorer.summary(metrics))
    if plots_dir is not None and task.plots:
        from .val_plots import write_val_plots

        labels = getattr(getattr(loader, "dataset", None), "labels", None)
        write_val_plots(metrics, Path(plots_dir), batches=shown, labels=labels,
                        skeleton=(getattr(model, "arch", None) or {}).get("skeleton"))
    return metrics


def _eval_mode(net: torch.nn.Module) -> Any:
    """Put ``net`` in eval mode; returns the function that restores each module's own mode.

    Only the modules in training mode are switched (an EMA copy is in eval mode already, and
    ``Module.train`` walks and sets every submodule: tens of milliseconds for a detector, every
    validation). A module class that overrides ``train`` goes through ``eval()`` / ``train()``.
    """
    from torch import nn

    mods = list(net.modules())
    if any(type(m).train is not nn.Module.train for m in mods):
        was = net.training
        net.eval()
        return lambda: net.train(was)
    training = [m for m in mods if m.training]
    for m in training:
        m.training = False

    def restore() -> None:
        for m in training:
            m.training = True

    return restore


def val_loss_supported(model: Family) -> bool:
    """Whether the training criterion can score eval-mode outputs: the family trains its network
    as one stage (``train_stages() is None``), so ``net(x)`` has one structure in both modes."""
    return model.train_stages() is None


def _to_numpy(x: Any) -> np.ndarray:
    return x.detach().cpu().numpy() if isinstance(x, Tensor) else np.asarray(x)
