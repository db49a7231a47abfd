"""Detection: boxes (x1, y1, x2, y2, score, class) per image, scored by COCO mAP.

Prediction letterboxes on the model's device (:mod:`.preprocess`); with a captured decode the
graph returns a fixed number of sorted candidates and only the data-dependent rest (threshold,
NMS, ``max_det``) runs here, after one device-to-host copy per batch (SPEC G-2: NMS is never
captured). Validation scores in original image pixels (:mod:`.scoring`): COCO mAP50-95 / mAP50
through faster-coco-eval, precision and recall at the best class-mean F1 (:mod:`.metrics`), the
result a :class:`~.results.DetMetrics`.
"""

from __future__ import annotations

import logging
from typing import Any, ClassVar

import numpy as np
import torch
from torch import Tensor

from ...ops.boxes import scale_boxes, scale_boxes_into
from ...ops.candidates import candidates_truncated, select_detections
from ...ops.candidates import to_host as candidates_to_host
from ..base import LetterboxTask, to_host
from .preprocess import preprocess  # noqa: F401  (the package-level name others may import)

logger = logging.getLogger(__name__)


class DetectTask(LetterboxTask):
    name: ClassVar[str] = "detect"
    results_field: ClassVar[str] = "boxes"
    project: ClassVar[str] = "runs/detect"
    tracks: ClassVar[bool] = True
    plots: ClassVar[bool] = True
    scans_labels: ClassVar[bool] = True
    val_losses: ClassVar[bool] = True
    metric_keys: ClassVar[tuple[str, ...]] = ("precision", "recall", "mAP50", "mAP50-95")

    # ------------------------------------------------------------------ prediction (LetterboxTask.preprocess)
    def predict_decoded(self, twin: Any, opts: Any) -> bool:
        k = int(getattr(twin, "DECODE_TOPK", 0) or 0)
        return bool(k) and opts.classes is None and opts.max_det <= k

    def outputs(self, twin: Any, raw: Any, *, items: list[Any], params: list[Any], opts: Any, decoded: bool,
                rerun: Any) -> list[Tensor]:
        host = candidates_to_host(raw) if decoded else None
        if decoded and twin.DECODE_NMS and candidates_truncated(host, opts.conf, k=twin.DECODE_TOPK):
            # conf so low that the top-k may have cut candidates the eager path keeps: this batch
            # takes the raw network output and the family's eager postprocess instead
            _note_truncated(twin, opts.conf)
            raw, decoded = rerun(), False
        if decoded:
            dets = select_detections(raw, conf=opts.conf, iou=opts.iou, max_det=opts.max_det,
                                     agnostic=opts.agnostic_nms, nms=twin.DECODE_NMS, host=host)
        else:
            dets = to_host(twin.postprocess(raw, conf=opts.conf, iou=opts.iou, classes=opts.classes,
                                            max_det=opts.max_det, agnostic=opts.agnostic_nms))
        for it, det, p in zip(items, dets, params, strict=True):
            if det.device.type == "cpu" and det.dtype == torch.float32:  # numpy rows: rescaled in place
                scale_boxes_into(det.numpy(), ratio=p.ratio, pad=p.pad, orig_shape=it.shape)
            else:
                det[:, :4] = scale_boxes(det[:, :4], ratio=p.ratio, pad=p.pad, orig_shape=it.shape)
        return dets

    # ------------------------------------------------------------------ data
    def load_data(self, data: str) -> Any:
        from ...data.config import load_data_config

        return load_data_config(str(data))

    def dataset(self, config: Any, files: list[Any], *, split: str, imgsz: int, augment: bool = False,
                train_cfg: Any = None) -> Any:
        """A :class:`~libreyolo.data.dataset.DetectionDataset`; with ``train_cfg`` (the trainer's
        config) its augmentation (training split), ``single_cls``, ``cache`` and ``rect`` apply."""
        from ...data.dataset import DetectionDataset

        options: dict[str, Any] = {}
        if train_cfg is not None:
            options["single_cls"] = train_cfg.single_cls
            if getattr(train_cfg, "rect", False):  # aspect-sorted, rectangular items (both splits)
                options["rect"] = True
            if augment:
                from ...data.augment import AugmentConfig

                options.update(hyp=AugmentConfig(**train_cfg.augment_kwargs()), cache=train_cfg.cache)
        prefix = f"{split}: "
        return DetectionDataset(files, imgsz=imgsz, augment=augment, nc=config.nc, prefix=prefix,
                                labels=config.label_index(split, files, prefix=prefix), **options)

    # ------------------------------------------------------------------ validation
    def val_outputs(self, model: Any, raw: Any, *, conf: float, iou: float, max_det: int) -> list[Tensor]:
        return model.postprocess(raw, conf=conf, iou=iou, classes=None, max_det=max_det, agnostic=False)

    def scorer(self, names: dict[int, str]) -> Any:
        from .scoring import DetectionScorer

        return DetectionScorer(names)


def _pixels(items: list[Any], device: torch.device) -> tuple[list[np.ndarray], bool]:
    """(the arrays to upload, whether they are BGR): on CUDA a batch that came as BGR (files,
    video, BGR arrays) goes up as it is and has its channels swapped there; otherwise RGB."""
    if device.type == "cuda" and all(it.rgb is None for it in items):
        return [it.bgr for it in items], True
    return [it.image for it in items], False


_TRUNCATION_NOTED: set[str] = set()


def _note_truncated(twin: Any, conf: float) -> None:
    key = twin.FAMILY
    log = logger.debug if key in _TRUNCATION_NOTED else logger.info
    _TRUNCATION_NOTED.add(key)
    log("%s: more than %d candidates score above conf=%g, so this batch runs the eager postprocess on "
        "the raw outputs (the captured decode keeps a fixed top-%d)", key, twin.DECODE_TOPK, conf, twin.DECODE_TOPK)
