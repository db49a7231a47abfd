"""Training configuration: one frozen dataclass, built from user overrides.

Defaults follow the YOLOv9 reference recipe (``hyp.scratch-high.yaml``) for the optimiser, warm-up
and loss gains; augmentation defaults are the common YOLO ones (``scale=0.5`` instead of the
reference's 0.9, which suits small models and small datasets better).
"""

from __future__ import annotations

import dataclasses
import logging
import math
import typing
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any, Literal

from ..config import coerce as _coerce
from ..config import expand_cfg_file  # noqa: F401 - re-exported for the trainer
from ..errors import ConfigError, check_keys

if TYPE_CHECKING:
    from ..models._base.family import Family

logger = logging.getLogger(__name__)

OptimizerName = Literal["auto", "SGD", "AdamW"]
# the rounding multiple of a training size without a model (the largest stride of the detection families)
MAX_STRIDE = 32
AmpDtype = Literal["float16", "bfloat16"]

# augmentation keys passed through to libreyolo.data.augment.AugmentConfig
AUGMENT_KEYS = ("mosaic", "mixup", "degrees", "translate", "scale", "shear", "perspective", "fliplr", "flipud",
                "hsv_h", "hsv_s", "hsv_v", "close_mosaic")


def imgsz_multiple(model: Any) -> int:
    """What a training ``imgsz`` is rounded up to for ``model``: its own stride, as prediction
    rounds (``check_imgsz(..., stride=model.stride)``): 32 for the detectors, DINOv2's 14-pixel
    patches (518 stays 518, which 32 would make 544 and then no whole number of patches), 16 for
    NAFNet and the ViTs, 1 for ESRGAN and SwinIR (any size); 32 without a model.

    Example:
        >>> class P14: stride = 14
        >>> class Any1: stride = 1
        >>> imgsz_multiple(P14()), imgsz_multiple(Any1()), imgsz_multiple(None)
        (14, 1, 32)
    """
    return int(getattr(model, "stride", MAX_STRIDE) or MAX_STRIDE)


@dataclass(frozen=True, kw_only=True)
class TrainConfig:
    """Every key ``model.train(**overrides)`` accepts.

    Build it with :meth:`from_overrides`, which checks the keys, coerces the values (the strings
    of the command line too) and validates them; ``TrainConfig(...)`` itself checks nothing.

    Example:
        >>> cfg = TrainConfig.from_overrides({"epochs": 3, "imgsz": 320})
        >>> cfg.epochs, cfg.imgsz, cfg.optimizer, cfg.data
        (3, 320, 'auto', 'shapes')
        >>> TrainConfig.from_overrides({"epoch": 3})
        Traceback (most recent call last):
        ...
        libreyolo.errors.ConfigError: unknown train argument 'epoch'. Did you mean 'epochs'? ...
        >>> dataclasses.replace(cfg, epochs=1).epochs  # frozen: a changed copy
        1
    """

    # data and run
    cfg: str | None = field(default=None, metadata={"help": "a YAML file of train keys (keys given directly "
                                                    "override it)"})
    data: str = "shapes"
    epochs: int = 100
    batch: int = 16
    imgsz: int = 640
    device: str | None = None  # "0,1,2,3" = DDP, one process per GPU (docs/distributed.md)
    world_size: int = 0  # DDP processes; 0 = one per listed device (set it with device="cpu" for CPU DDP)
    sync_bn: bool = False  # DDP: BatchNorm statistics over the global batch (SyncBatchNorm)
    workers: int = 8
    cache: bool | str = field(default="auto", metadata={"help": "True / 'ram': decode and resize the training "
                                                        "images once into memory (skipped with a warning when "
                                                        "they would take more than half the free memory); "
                                                        "'auto': only when they fit in 1 GiB and a quarter of "
                                                        "the free memory; False: read every image from disk"})
    seed: int = 0
    deterministic: bool = True
    project: str = "runs/detect"
    name: str = "train"
    exist_ok: bool = False
    resume: bool | str = False
    val: bool = True
    plots: bool = True
    tensorboard: bool = True
    mlflow: bool = False
    wandb: bool = False
    verbose: bool = True
    cuda_graph: bool = False
    rect: bool = False  # rectangular batches grouped by aspect ratio, no mosaic (libreyolo.data.batching)
    multi_scale: float = 0.0  # fraction f: batches at a few sizes in [imgsz*(1-f), imgsz*(1+f)] (.scales)
    single_cls: bool = field(default=False, metadata={"help": "train as one class: every label becomes class 0, "
                                                      "the model gets a one-class head"})
    fraction: float = field(default=1.0, metadata={"help": "train on the first fraction (0, 1] of the training "
                                                   "images, in their sorted order"})
    freeze: int | str = field(default=0, metadata={"help": "freeze the first N top-level modules of the network, "
                                                   "comma-separated module-name prefixes (stem1,p2), or 'probe' "
                                                   "(classifiers: a linear probe, only the head trains)"})
    # optimiser and schedule
    optimizer: OptimizerName = "auto"
    lr0: float = 0.01
    lrf: float = 0.01
    momentum: float = 0.937
    weight_decay: float = 0.0005
    warmup_epochs: float = 3.0
    warmup_momentum: float = 0.8
    warmup_bias_lr: float = 0.1
    cos_lr: bool = False
    nbs: int | None = field(default=None, metadata={"help": "nominal batch: accumulate gradients to this many images "
                                                    "per optimizer step (default: 64 under SGD, every batch "
                                                    "under AdamW; weight decay is normalised to it either way)"})
    clip_grad: float = 10.0
    amp: bool = True
    amp_dtype: AmpDtype = "float16"
    ema: bool = True
    ema_decay: float = 0.9999
    ema_tau: float = 2000.0
    patience: int = field(default=100, metadata={"help": "stop after this many epochs without a fitness "
                                                  "improvement (0 = never stop early)"})
    save_period: int = field(default=-1, metadata={"help": "also save weights/epoch<N>.pt (resumable) every N "
                                                   "epochs (-1 = off)"})
    time_limit: float = 0.0  # seconds of epoch loop; epochs are cut to fit, schedule follows (0 = no limit)
    # loss gains (YOLOv9 reference)
    box: float = 7.5
    cls: float = 0.5
    dfl: float = 1.5
    # augmentation
    mosaic: float = 1.0
    mixup: float = 0.0
    close_mosaic: int = 10
    degrees: float = 0.0
    translate: float = 0.1
    scale: float = 0.5
    shear: float = 0.0
    perspective: float = 0.0
    fliplr: float = 0.5
    flipud: float = 0.0
    hsv_h: float = 0.015
    hsv_s: float = 0.7
    hsv_v: float = 0.4
    # validation during training
    val_conf: float = 0.001
    val_iou: float = 0.7
    max_det: int = 300

    @classmethod
    def keys(cls) -> list[str]:
        """The key names, in declaration order.

        Example:
            >>> TrainConfig.keys()[:4]
            ['cfg', 'data', 'epochs', 'batch']
        """
        return [f.name for f in dataclasses.fields(cls)]

    @classmethod
    def from_overrides(cls, overrides: dict[str, Any], *, multiple: int = MAX_STRIDE) -> TrainConfig:
        """Validate ``overrides`` (unknown keys raise :class:`ConfigError` with a suggestion).

        Values are coerced to the field types and ``imgsz`` is rounded up to a multiple of
        ``multiple`` (32; the model's own stride: :func:`imgsz_multiple`).

        Example:
            >>> cfg = TrainConfig.from_overrides({"epochs": "5", "imgsz": 100, "cos_lr": "true"})
            >>> cfg.epochs, cfg.imgsz, cfg.cos_lr
            (5, 128, True)
        """
        check_keys(overrides, cls.keys(), what="train")
        hints = typing.get_type_hints(cls)
        if isinstance(overrides.get("freeze"), (list, tuple)):  # freeze=["stem1", "p2"]: module-name prefixes
            overrides = {**overrides, "freeze": ",".join(map(str, overrides["freeze"]))}
        values = {k: _coerce(k, v, hints[k]) for k, v in overrides.items()}
        imgsz = values.get("imgsz")
        if isinstance(imgsz, int) and imgsz >= 1 and imgsz % multiple:
            rounded = max(math.ceil(imgsz / multiple), 1) * multiple
            logger.warning("imgsz=%d is not a multiple of the model's stride %d: training at imgsz=%d",
                           imgsz, multiple, rounded)
            values["imgsz"] = rounded
        cfg = cls(**values)
        cfg._check(multiple=multiple)
        return cfg

    def _check(self, *, multiple: int = MAX_STRIDE) -> None:
        positive = {"epochs": self.epochs, "batch": self.batch, "imgsz": self.imgsz,
                    "nbs": 1 if self.nbs is None else self.nbs}
        for k, v in positive.items():
            if v < 1:
                raise ConfigError(f"{k} must be >= 1, got {v}")
        if self.world_size < 0:
            raise ConfigError(f"world_size must be >= 0 (0 = one process per listed device), got {self.world_size}")
        if self.workers < 0:
            raise ConfigError(f"workers must be >= 0, got {self.workers}")
        if self.lr0 <= 0:
            raise ConfigError(f"lr0 must be > 0, got {self.lr0}")
        if self.close_mosaic < 0 or self.patience < 0 or self.time_limit < 0:
            raise ConfigError("close_mosaic, patience and time_limit must be >= 0")
        if not 0 < self.fraction <= 1:
            raise ConfigError(f"fraction must be in (0, 1] (the share of training images used), got {self.fraction}")
        if isinstance(self.freeze, int) and self.freeze < 0 or isinstance(self.freeze, str) and not self.freeze.strip(","):
            raise ConfigError(f"freeze must be an int >= 0 or module-name prefixes like 'stem1,p2', got {self.freeze!r}")
        if self.save_period == 0 or self.save_period < -1:
            raise ConfigError(f"save_period must be >= 1 (every N epochs) or -1 (off), got {self.save_period}")
        if not 0 <= self.multi_scale < 1:
            raise ConfigError(f"multi_scale must be 0 (off) or a fraction in (0, 1) of imgsz, e.g. 0.5 for sizes "
                              f"in [imgsz*0.5, imgsz*1.5], got {self.multi_scale}")
        if self.imgsz % multiple:  # from_overrides rounds; a directly built config must be right
            raise ConfigError(f"imgsz must be a multiple of {multiple} (the model's stride), got {self.imgsz}")

    def to_dict(self) -> dict[str, Any]:
        """Plain types only (safe for yaml and ``torch.load(weights_only=True)``).

        Example:
            >>> d = TrainConfig.from_overrides({"epochs": 2}).to_dict()
            >>> d["epochs"], d["optimizer"], len(d) == len(TrainConfig.keys())
            (2, 'auto', True)
        """
        return dataclasses.asdict(self)

    def augment_kwargs(self) -> dict[str, Any]:
        return {k: getattr(self, k) for k in AUGMENT_KEYS}

    def logger_kwargs(self) -> dict[str, Any]:
        """Keyword arguments of :class:`~libreyolo.training.loggers.ResultsLogger` for this run."""
        return {"tensorboard": self.tensorboard, "plots": self.plots, "mlflow": self.mlflow, "wandb": self.wandb,
                "run_config": self.to_dict()}


# keys that may change when resuming; every other key comes from the checkpoint's train_args.
# ``epochs`` extends (or shortens) the schedule: the lr decay, close_mosaic and the warm-up cap
# follow the new length from the resumed epoch on.
RESUME_OVERRIDABLE = ("epochs", "device", "world_size", "workers", "verbose", "plots", "tensorboard", "mlflow",
                      "wandb")
# keys that only locate the run to resume (``resume=True`` searches ``project``)
RESUME_LOCATORS = ("resume", "project")


def resolve_resume(cfg: TrainConfig, explicit: set[str]) -> tuple[Path, dict[str, Any], TrainConfig]:
    """The checkpoint ``cfg.resume`` names (``True`` = the newest ``*/weights/last.pt`` under ``project``),
    the checkpoint itself, and the run's config: its saved ``train_args`` plus the explicitly given
    :data:`RESUME_OVERRIDABLE` keys. Any other explicitly given key whose value differs from the
    saved one raises :class:`ConfigError` naming it (passing the saved value again is fine)."""
    from ..errors import CheckpointError
    from ..io.checkpoint import read_checkpoint

    r = cfg.resume
    if isinstance(r, str):
        path = Path(r)
    else:
        found = sorted(Path(cfg.project).glob("*/weights/last.pt"), key=lambda p: p.stat().st_mtime)
        if not found:
            raise CheckpointError(f"resume=True found no */weights/last.pt under {cfg.project!r}; "
                                  "pass resume='path/to/last.pt'")
        path = found[-1]
    ckpt = read_checkpoint(path)
    if "train_state" not in ckpt or "train_args" not in ckpt:
        raise CheckpointError(f"{str(path)!r} holds no training state (a best.pt, or the "
                              "last.pt of a run that finished all its epochs); resume from weights/last.pt of an "
                              f"unfinished run, or start a new run from these weights (model={path})")
    saved = {k: v for k, v in dict(ckpt["train_args"]).items() if k in TrainConfig.keys()}
    # the saved arguments were validated (imgsz rounded for its model) when the run started
    base = TrainConfig.from_overrides({k: v for k, v in saved.items() if k != "resume"}, multiple=1)
    refused = sorted(k for k in explicit if k in TrainConfig.keys() and k not in RESUME_OVERRIDABLE
                     and k not in RESUME_LOCATORS and getattr(cfg, k) != getattr(base, k))
    if refused:
        k = refused[0]
        raise ConfigError(f"{k}={getattr(cfg, k)!r} cannot change on resume (the run used {k}={getattr(base, k)!r}); "
                          f"only {', '.join(RESUME_OVERRIDABLE)} may change on resume; to train with "
                          f"{k}={getattr(cfg, k)!r}, start a new run from these weights (model={path} {k}=...)")
    saved.update({k: getattr(cfg, k) for k in RESUME_OVERRIDABLE if k in explicit})
    saved["resume"] = str(path)
    new = TrainConfig.from_overrides(saved, multiple=1)
    done = int(ckpt["train_state"]["epoch"]) + 1
    if done >= new.epochs:
        if "epochs" in explicit and new.epochs < done:
            raise ConfigError(f"epochs={new.epochs} on resume: {str(path)!r} has already trained {done} "
                              f"epoch{'s' if done != 1 else ''}; pass epochs > {done} to extend the run")
        raise ConfigError(f"{str(path)!r} already finished all {new.epochs} epoch{'s' if new.epochs != 1 else ''}; "
                          f"nothing to resume (pass epochs > {done} to extend the run)")
    return path, ckpt, new




def with_family_defaults(model: Family, overrides: dict[str, Any]) -> dict[str, Any]:
    """The family's training recipe (``TRAIN_DEFAULTS``, e.g. AdamW and fp32 for D-FINE) under
    the user's keys: what the user passes wins. A resumed run keeps its saved arguments."""
    defaults = dict(getattr(model, "TRAIN_DEFAULTS", None) or {})
    applied = {k: v for k, v in defaults.items() if k not in overrides}
    if not applied or overrides.get("resume"):
        return dict(overrides)
    logger.info("%s recipe defaults: %s (pass a key to override it)", model.FAMILY,
                ", ".join(f"{k}={v}" for k, v in applied.items()))
    return {**applied, **overrides}


# Help of the keys without one in their field metadata (what `libreyolo train --help` prints).
TRAIN_HELP: dict[str, str] = {
    "data": "dataset: a YOLO yaml, a COCO folder or yaml with <split>_json keys, an ImageFolder root, "
            "or a built-in name (shapes, shapes-cls)",
    "epochs": "training epochs", "batch": "images per batch (the total over all GPUs under DDP)",
    "imgsz": "square training size in pixels (rounded up to a multiple of the model's stride, 32 for the detectors)",
    "device": "cpu, 0, cuda:1, or 0,1,2,3 for DDP (one process per GPU)",
    "world_size": "DDP processes (0 = one per listed device; with device=cpu for CPU DDP)",
    "sync_bn": "DDP: BatchNorm statistics over the global batch", "workers": "data loader processes (capped to the CPUs)",
    "seed": "seed of augmentation, shuffling and the run's random state", "deterministic": "deterministic algorithms where torch has them",
    "project": "folder of runs", "name": "run folder name under project (numbered when it exists)",
    "exist_ok": "write into an existing run folder", "resume": "True (the last run) or a last.pt to continue",
    "val": "validate every epoch", "plots": "write pictures (batches, labels, curves, confusion matrix)",
    "tensorboard": "TensorBoard events when tensorboard is installed",
    "mlflow": "log params, metrics and files to MLflow (when installed; MLFLOW_TRACKING_URI applies)",
    "wandb": "log config, metrics and files to Weights & Biases (when installed; WANDB_MODE applies)", "verbose": "progress bars and per-epoch lines",
    "cuda_graph": "capture and replay the training step as a CUDA graph (docs/cuda-graphs-training.md)",
    "rect": "rectangular training batches: images sorted by aspect ratio, each batch letterboxed to the "
            "smallest multiple of 32 holding its images at imgsz long side, batch order shuffled; turns "
            "mosaic (and mixup) off; validation is rectangular too",
    "multi_scale": "0 = off, or a fraction f: each batch is resized on the device to one of up to 5 fixed "
                   "sizes (multiples of 32, imgsz included) spread over [imgsz*(1-f), imgsz*(1+f)], picked "
                   "by a seeded stream of its own; with cuda_graph=True each size is captured once",
    "optimizer": "auto, SGD or AdamW (auto: AdamW for runs under 10,000 steps, else SGD)",
    "lr0": "initial learning rate (SGD / explicit AdamW; auto AdamW uses 0.002 * 5 / (4 + nc))",
    "lrf": "final learning rate as a fraction of lr0", "momentum": "SGD momentum / AdamW beta1",
    "weight_decay": "weight decay of conv/linear weights, normalised to nbs images",
    "warmup_epochs": "warm-up length in epochs (at least 100 iterations, at most half the run; 0 = none)",
    "warmup_momentum": "SGD momentum at the start of warm-up",
    "warmup_bias_lr": "learning rate the bias group starts warm-up at", "cos_lr": "cosine instead of linear decay",
    "clip_grad": "gradient-norm clipping (0 = off)", "amp": "mixed precision on CUDA",
    "amp_dtype": "float16 (loss scaling) or bfloat16", "ema": "exponential moving average of the weights",
    "ema_decay": "EMA decay", "ema_tau": "EMA warm-up constant (iterations)",
    "time_limit": "seconds of epoch loop; epochs are cut to fit and the schedule follows (0 = no limit)",
    "box": "box loss gain", "cls": "classification loss gain", "dfl": "distribution focal loss gain",
    "mosaic": "mosaic probability", "mixup": "probability a mosaic is blended with a second one (MixUp)",
    "close_mosaic": "switch mosaic off for the last N epochs",
    "degrees": "random rotation (+- degrees)", "translate": "random translation (fraction of the size)",
    "scale": "random scale gain (+- fraction)", "shear": "random shear (+- degrees)",
    "perspective": "random perspective (fraction)", "fliplr": "horizontal flip probability",
    "flipud": "vertical flip probability", "hsv_h": "hue jitter (fraction)", "hsv_s": "saturation jitter (fraction)",
    "hsv_v": "value jitter (fraction)", "val_conf": "confidence threshold of validation during training",
    "val_iou": "NMS IoU of validation during training", "max_det": "most detections per image in validation",
}
