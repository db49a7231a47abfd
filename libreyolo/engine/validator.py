"""Validation: classifiers get top-1 / top-5 (:mod:`.classify_val`); detectors COCO-style mAP50-95 / mAP50 through faster-coco-eval, plus precision and recall.

Predictions and ground truth are compared in ORIGINAL image pixels: predictions are mapped back
through each image's letterbox (``ratio_pad``), and so is the ground truth, which the dataset
hands over normalised to the network input.

- mAP50-95 and mAP50: ``faster_coco_eval.COCOeval_faster`` (bbox, area "all", 100 detections
  per image and class as in COCO; classes without ground truth are left out).
- precision and recall: at the confidence that maximises the class-mean F1 at IoU 0.5, computed
  by :mod:`libreyolo.engine.metrics` over every kept detection (conf >= ``conf``, default 0.001).
- fitness (what training uses to pick best.pt): ``0.1 * mAP50 + 0.9 * mAP50-95``.

A detector's result is a :class:`~libreyolo.engine.val_metrics.DetMetrics`: the dict of these
numbers with per-class AP / precision / recall, ``maps``, the confusion matrix
(:func:`libreyolo.engine.metrics.confusion_matrix`), the curves, ``speed`` and, when the caller
passes its criterion (the trainer does), the mean validation losses. ``plots`` writes the
pictures of :mod:`libreyolo.engine.val_plots`.
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
from ..ops.boxes import scale_boxes, xywh_to_xyxy
from . import metrics as M
from .val_metrics import DetMetrics

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


def fitness(m: dict[str, float]) -> float:
    return 0.1 * m["mAP50"] + 0.9 * m["mAP50-95"]


def validate(model: Family, overrides: dict[str, Any]) -> dict[str, float]:
    """Validate ``model`` on a dataset split.

    A detector returns a :class:`~libreyolo.engine.val_metrics.DetMetrics`: a dict of mAP50-95,
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
    from ..data.config import load_data_config
    from ..data.dataset import DetectionDataset
    from ..data.loader import build_dataloader
    from ..models._base.family import select_device

    if cfg.data is not None and not str(cfg.data).strip():
        raise empty_value("data")
    data = cfg.data or model.train_args.get("data")
    if not data:
        raise ConfigError("val needs a dataset: pass data='my-dataset.yaml' (or data='shapes')")
    classify = getattr(model, "OUTPUT_KIND", "boxes") == "probs"
    if classify:
        from ..data.classify import load_classify_data

        dcfg: Any = load_classify_data(str(data))
    else:
        dcfg = load_data_config(str(data))
    if dcfg.nc != model.nc:
        raise ConfigError(f"the model predicts {model.nc} classes but {data!r} has {dcfg.nc}; "
                          "validate on the dataset the model was trained for")
    if cfg.plots and classify:
        logger.warning("val: plots=True draws detection pictures; a classifier gets none")
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
    if classify:
        from ..data.classify import ClassifyDataset, collate_classify
        from .classify_val import run_classify_validation

        cds = ClassifyDataset(files, imgsz=imgsz, augment=False, prefix=f"{cfg.split}: ")
        closer = build_dataloader(cds, batch=cfg.batch, workers=workers, shuffle=False, seed=0,
                                  pin_memory=device.type == "cuda", collate_fn=collate_classify)
        return run_classify_validation(model=model, net=model.net, loader=closer, names=dcfg.names, amp_dtype=amp,
                                       verbose=cfg.verbose, progress=cfg.verbose)
    ds = DetectionDataset(files, imgsz=imgsz, augment=False, hyp=None, nc=dcfg.nc, rect=False,
                          prefix=f"{cfg.split}: ", labels=dcfg.label_index(cfg.split, files, prefix=f"{cfg.split}: "))
    loader = build_dataloader(ds, batch=cfg.batch, workers=workers, shuffle=False, seed=0,
                              pin_memory=device.type == "cuda")
    plots_dir = None
    if cfg.plots:
        plots_dir = increment_dir(Path(cfg.project or "runs/detect") / cfg.name, exist_ok=cfg.exist_ok)
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
    of the same architecture may be passed. A classifier (``OUTPUT_KIND == "probs"``) is scored
    by :func:`libreyolo.engine.classify_val.run_classify_validation` (top-1 / top-5, a plain dict)
    instead. A detector returns a :class:`~libreyolo.engine.val_metrics.DetMetrics` (a dict).

    ``criterion`` (``criterion(raw, batch) -> (loss, items Tensor[len(loss_names)])``, the
    training loss): when given and :func:`val_loss_supported`, the mean ``items`` over the split
    become ``DetMetrics.losses`` (keyed by ``loss_names``). ``plots_dir``: write the pictures of
    :mod:`libreyolo.engine.val_plots` there (``plot_batches`` batches of predictions next to labels).
    """
    from tqdm import tqdm

    if getattr(model, "OUTPUT_KIND", "boxes") == "probs":
        from .classify_val import run_classify_validation

        return run_classify_validation(model=model, net=net, loader=loader, names=names, amp_dtype=amp_dtype,
                                       verbose=verbose, progress=progress)

    device = next(net.parameters()).device
    if criterion is not None and not val_loss_supported(model):
        logger.debug("val: no validation losses (the training forward of %s is split in stages)",
                     getattr(model, "FAMILY", "this family"))
        criterion = None
    was_training = net.training
    net.eval()
    collector = _Collector()
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
                dets = model.postprocess(raw, conf=conf, iou=iou, classes=None, max_det=max_det, agnostic=False)
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
                collector.add_batch(batch, dets, input_hw=tuple(imgs.shape[2:]))
                if plots_dir is not None and bi < plot_batches:
                    shown.append((_to_numpy(batch["img"]), {k: _to_numpy(batch[k]) for k in ("batch_idx", "cls",
                                                                                               "bboxes")},
                                  [d.detach().float().cpu().numpy() for d in dets]))
    finally:
        net.train(was_training)
    result = collector.score(names)
    ms = 1000 / max(n_img, 1)
    result["ms_per_image"] = (t_inf + t_post) * ms
    losses: dict[str, float] = {}
    if loss_sum is not None:
        keys = list(loss_names) or [f"loss{i}" for i in range(loss_sum.numel())]
        losses = {k: float(v) / n_loss for k, v in zip(keys, loss_sum.cpu().tolist(), strict=False)}
    metrics = DetMetrics(result, names=names, per_class=collector.per_class, confusion_matrix=collector.confusion,
                         curves=collector.curves, speed={"preprocess": t_pre * ms, "inference": t_inf * ms,
                                                         "postprocess": t_post * ms},
                         save_dir=Path(plots_dir) if plots_dir is not None else None, losses=losses)
    if verbose:
        logger.info("\n%s", metrics.summary())
    if plots_dir is not None:
        from .val_plots import write_val_plots

        labels = getattr(getattr(loader, "dataset", None), "labels", None)
        write_val_plots(metrics, Path(plots_dir), batches=shown, labels=labels)
    return metrics


def val_loss_supported(model: Family) -> bool:
    """Whether the training criterion can score eval-mode outputs: the family trains its network
    as one stage (``train_stages() is None``), so ``net(x)`` has one structure in both modes."""
    return model.train_stages() is None


def _to_numpy(x: Any) -> np.ndarray:
    return x.detach().cpu().numpy() if isinstance(x, Tensor) else np.asarray(x)


class _Collector:
    """Gathers per-image predictions and ground truth (original pixels, xyxy) as numpy."""

    def __init__(self) -> None:
        self.images: list[dict[str, Any]] = []
        self.per_class: dict[int, dict[str, float]] = {}
        self.curves: dict[str, np.ndarray] = {}
        self.confusion: np.ndarray | None = None

    def add_batch(self, batch: dict[str, Any], dets: list[Tensor], *, input_hw: tuple[int, int]) -> None:
        h_in, w_in = input_hw
        bidx = batch["batch_idx"].cpu()
        cls = batch["cls"].cpu().view(-1)
        boxes = batch["bboxes"].cpu().float().view(-1, 4)
        for i, det in enumerate(dets):
            oh, ow = (int(v) for v in batch["ori_shape"][i])
            ratio, pad = _ratio_pad(batch["ratio_pad"][i])
            sel = bidx == i
            gt = xywh_to_xyxy(boxes[sel] * torch.tensor([w_in, h_in, w_in, h_in], dtype=torch.float32))
            gt = _unletterbox(gt, ratio, pad, (oh, ow))
            det = det.detach().float().cpu()
            pb = _unletterbox(det[:, :4], ratio, pad, (oh, ow))
            self.images.append({"hw": (oh, ow), "gt": gt.numpy(), "gt_cls": cls[sel].numpy().astype(int),
                                "pred": pb.numpy(), "score": det[:, 4].numpy(), "pred_cls": det[:, 5].numpy().astype(int)})

    def score(self, names: dict[int, str]) -> dict[str, float]:
        """The headline numbers; also fills ``per_class``, ``curves`` and ``confusion``."""
        gt_cls = np.concatenate([im["gt_cls"] for im in self.images]) if self.images else np.zeros(0, int)
        self.confusion = M.confusion_matrix(self.images, len(names))
        out = {"mAP50-95": 0.0, "mAP50": 0.0, "precision": 0.0, "recall": 0.0}
        out["images"] = float(len(self.images))
        out["instances"] = float(len(gt_cls))
        if len(gt_cls) == 0:
            logger.warning("val: the split has no labelled boxes; metrics are 0")
            out["fitness"] = 0.0
            return out
        coco = coco_map(self.images, names)
        out["mAP50-95"], out["mAP50"] = coco["map"], coco["map50"]
        self.per_class = coco["per_class"]
        parts = [M.match_image(im["pred"], im["score"], im["pred_cls"], im["gt"], im["gt_cls"]) for im in self.images]
        tp = np.concatenate([p[0] for p in parts]) if parts else np.zeros((0, 10), bool)
        pr = M.evaluate(tp, np.concatenate([p[1] for p in parts]), np.concatenate([p[2] for p in parts]), gt_cls)
        out["precision"], out["recall"] = pr.precision, pr.recall
        for k, c in enumerate(pr.classes):
            row = self.per_class.setdefault(int(c), {"ap50-95": 0.0, "ap50": 0.0})
            row.update(instances=float((gt_cls == c).sum()),
                       images=float(sum(bool((im["gt_cls"] == c).any()) for im in self.images)),
                       precision=float(pr.class_precision[k]), recall=float(pr.class_recall[k]))
        pr_classes = sorted(coco["pr50"])
        self.curves = {"classes": pr.classes, "conf": pr.conf_grid, "precision": pr.p_curve, "recall": pr.r_curve,
                       "f1": pr.f1_curve, "pr_recall": M.RECALL_POINTS, "pr_classes": np.array(pr_classes, dtype=int),
                       "pr_precision": (np.stack([coco["pr50"][c] for c in pr_classes]) if pr_classes
                                        else np.zeros((0, len(M.RECALL_POINTS))))}
        out["fitness"] = fitness(out)
        return out


def _ratio_pad(rp: Any) -> tuple[tuple[float, float], tuple[float, float]]:
    ratio, pad = rp
    ratio = tuple(float(r) for r in (ratio if isinstance(ratio, (tuple, list)) else (ratio,)))
    rw, rh = (ratio[0], ratio[1]) if len(ratio) > 1 else (ratio[0], ratio[0])
    return (rw, rh), (float(pad[0]), float(pad[1]))


def _unletterbox(boxes: Tensor, ratio: tuple[float, float], pad: tuple[float, float], hw: tuple[int, int]) -> Tensor:
    if ratio[0] == ratio[1]:
        return scale_boxes(boxes, ratio=ratio[0], pad=pad, orig_shape=hw)
    out = boxes.clone()
    out[:, [0, 2]] = ((out[:, [0, 2]] - pad[0]) / ratio[0]).clamp(0, hw[1])
    out[:, [1, 3]] = ((out[:, [1, 3]] - pad[1]) / ratio[1]).clamp(0, hw[0])
    return out


def coco_map(images: list[dict[str, Any]], names: dict[int, str]) -> dict[str, Any]:
    """COCO bbox mAP with faster-coco-eval.

    images: per image ``hw`` (h, w), ``gt`` (ndarray[G, 4] xyxy), ``gt_cls`` (ndarray[G]),
    ``pred`` (ndarray[K, 4] xyxy), ``score`` (ndarray[K]), ``pred_cls`` (ndarray[K]); original pixels.
    Returns {"map", "map50", "per_class": {cls: {"ap50-95", "ap50"}}, "pr50": {cls: ndarray[101]}}:
    ``pr50`` is the IoU-0.5 precision envelope at the 101 COCO recall points (its mean is ``ap50``).
    """
    from faster_coco_eval import COCO, COCOeval_faster

    quiet: Callable[..., None] = lambda *a, **k: None  # noqa: E731 - silence the package's printing
    gt = {"images": [], "annotations": [], "categories": [{"id": int(c) + 1, "name": n} for c, n in names.items()]}
    dts = []
    for img_id, im in enumerate(images, start=1):
        h, w = im["hw"]
        gt["images"].append({"id": img_id, "height": int(h), "width": int(w)})
        for box, c in zip(im["gt"], im["gt_cls"], strict=True):
            bw, bh = float(box[2] - box[0]), float(box[3] - box[1])
            gt["annotations"].append({"id": len(gt["annotations"]) + 1, "image_id": img_id, "category_id": int(c) + 1,
                                      "bbox": [float(box[0]), float(box[1]), bw, bh], "area": bw * bh, "iscrowd": 0})
        for box, s, c in zip(im["pred"], im["score"], im["pred_cls"], strict=True):
            dts.append({"image_id": img_id, "category_id": int(c) + 1, "score": float(s),
                        "bbox": [float(box[0]), float(box[1]), float(box[2] - box[0]), float(box[3] - box[1])]})
    if not dts:
        return {"map": 0.0, "map50": 0.0, "per_class": {}, "pr50": {}}
    coco_gt = COCO(gt, print_function=quiet)
    coco_dt = coco_gt.loadRes(dts)
    ev = COCOeval_faster(coco_gt, coco_dt, iouType="bbox", print_function=quiet)
    ev.evaluate()
    ev.accumulate()
    ev.summarize()
    prec = np.asarray(ev.eval["precision"])  # (T, R, K, area, maxDets)
    per_class: dict[int, dict[str, float]] = {}
    pr50: dict[int, np.ndarray] = {}
    cat_ids = list(ev.params.catIds)
    for k, cat in enumerate(cat_ids):
        p = prec[:, :, k, 0, -1]
        if (p > -1).any():
            p50 = p[0][p[0] > -1]
            per_class[cat - 1] = {"ap50-95": float(p[p > -1].mean()), "ap50": float(p50.mean()) if p50.size else 0.0}
            pr50[cat - 1] = np.clip(p[0], 0.0, None)
    return {"map": max(float(ev.stats[0]), 0.0), "map50": max(float(ev.stats[1]), 0.0), "per_class": per_class,
            "pr50": pr50}
