"""Semantic segmentation: one class id per pixel, scored by mIoU and pixel accuracy.

Prediction letterboxes exactly as detection does (aspect ratio kept, 114 grey padding; a single
image runs at the smallest stride-multiple rectangle with ``rect=True``), the network returns
logits at a fraction of its input, and :func:`~.maps.to_original` turns each image's logits into
``Results.semantic``: Tensor[H, W] int64 class ids at the original image size (logits upsampled,
padding cut off, resized to the image, arg-max). Datasets are image folders with PNG index masks
(:mod:`libreyolo.data.semantic`); the built-in demo is ``data="shapes-sem"``. Validation scores
in original pixels (:mod:`.scoring`): mIoU, pixel accuracy (aAcc), mean class accuracy (mAcc),
per-class IoU; fitness is mIoU.
"""

from __future__ import annotations

from typing import Any, ClassVar

import torch
from torch import Tensor

from ...errors import ConfigError
from ..base import Task
from .maps import to_original


class SemanticTask(Task):
    name: ClassVar[str] = "semantic"
    results_field: ClassVar[str] = "semantic"
    project: ClassVar[str] = "runs/semantic"
    val_losses: ClassVar[bool] = True  # the validation masks are the training targets too (letterboxed)
    metric_keys: ClassVar[tuple[str, ...]] = ("mIoU", "aAcc", "mAcc")

    def __init__(self) -> None:
        from ...data.semantic import collate_semantic

        self.collate = collate_semantic

    # ------------------------------------------------------------------ prediction
    def preprocess(self, items: list[Any], *, imgsz: tuple[int, int], device: torch.device, dtype: torch.dtype,
                   channels_last: bool, rect: bool, stride: int) -> tuple[Tensor, list[Any]]:
        from ..detect.preprocess import preprocess

        bgr = device.type == "cuda" and all(it.rgb is None for it in items)  # swap channels on the GPU
        pixels = [it.bgr for it in items] if bgr else [it.image for it in items]
        return preprocess(pixels, imgsz, device, dtype=dtype, channels_last=channels_last, rect=rect,
                          stride=stride, bgr=bgr)

    def outputs(self, twin: Any, raw: Any, *, items: list[Any], params: list[Any], opts: Any, decoded: bool,
                rerun: Any) -> list[Tensor]:
        logits = twin.postprocess(raw, conf=opts.conf, iou=opts.iou, classes=None, max_det=opts.max_det,
                                  agnostic=False)
        maps = [to_original(lg, input_hw=p.out_shape, ratio=p.ratio, pad=p.pad, orig_hw=it.shape)
                for lg, p, it in zip(logits, params, items, strict=True)]
        return [m.cpu() for m in maps]

    # ------------------------------------------------------------------ data
    def load_data(self, data: str) -> Any:
        from ...data.semantic import load_semantic_data

        return load_semantic_data(str(data))

    def dataset(self, config: Any, files: list[Any], *, split: str, imgsz: int, augment: bool = False,
                train_cfg: Any = None) -> Any:
        """A :class:`~libreyolo.data.semantic.SemanticDataset`; the training split takes the trainer's
        flip and colour augmentation."""
        from ...data.semantic import SemanticDataset

        options: dict[str, Any] = {}
        if augment and train_cfg is not None:
            options = {k: getattr(train_cfg, k) for k in ("fliplr", "hsv_h", "hsv_s", "hsv_v")}
        return SemanticDataset(files, imgsz=imgsz, nc=config.nc, ignore_index=config.ignore_index, augment=augment,
                               prefix=f"{split}: ", **options)

    def check_train_options(self, cfg: Any) -> None:
        if cfg.single_cls:
            raise ConfigError("single_cls=True is for detection datasets; a semantic model needs its classes")
        if getattr(cfg, "rect", False):
            raise ConfigError("rect=True is for detection datasets (aspect-sorted rectangular batches); a "
                              "semantic model trains on square random crops")

    def train_defaults(self, family_imgsz: int, cfg: Any, explicit: set[str]) -> dict[str, Any]:
        """``imgsz`` defaults to the family's and ``project`` to runs/semantic."""
        changes: dict[str, Any] = {}
        if "imgsz" not in explicit:
            changes["imgsz"] = int(family_imgsz)
        if "project" not in explicit:
            changes["project"] = self.project
        return changes

    # ------------------------------------------------------------------ validation
    def val_outputs(self, model: Any, raw: Any, *, conf: float, iou: float, max_det: int) -> list[Tensor]:
        return model.postprocess(raw, conf=conf, iou=iou, classes=None, max_det=max_det, agnostic=False)

    def scorer(self, names: dict[int, str]) -> Any:
        from .scoring import SemanticScorer

        return SemanticScorer(names)
