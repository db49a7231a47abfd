"""Foreground matte: one alpha value in [0, 1] per pixel (dichotomous segmentation, background
removal), scored by IoU, MAE, F-measure and S-measure.

Prediction letterboxes exactly as detection does (aspect kept, 114 grey padding, the input a
multiple of the family's 32 px stride; a single image runs at the smallest such rectangle with
``rect=True``), the network returns matte logits at its input size, the family's postprocess
applies the sigmoid, and :func:`~libreyolo.tasks.depth.maps.to_original` turns each map into
``Results.alpha``: Tensor[H, W] float32 in [0, 1] at the original image size (padding cut off,
resized bilinearly). Datasets are image folders with a mask PNG per image
(:mod:`libreyolo.data.matte`); the built-in demo is ``data="shapes-matte"``. Validation scores in
original pixels (:mod:`.scoring`); fitness is IoU.
"""

from __future__ import annotations

from typing import Any, ClassVar

import torch
from torch import Tensor

from ...errors import ConfigError
from ..base import Task
from ..depth.maps import to_original


class MatteTask(Task):
    name: ClassVar[str] = "matte"
    results_field: ClassVar[str] = "alpha"
    project: ClassVar[str] = "runs/matte"
    val_losses: ClassVar[bool] = True  # the validation masks are the training targets too (letterboxed)
    metric_keys: ClassVar[tuple[str, ...]] = ("iou", "mae", "fmeasure", "smeasure")

    def __init__(self) -> None:
        from ...data.matte import collate_matte

        self.collate = collate_matte

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
        maps = twin.postprocess(raw, conf=opts.conf, iou=opts.iou, classes=None, max_det=opts.max_det,
                                agnostic=False)
        out = [to_original(m, input_hw=p.out_shape, ratio=p.ratio, pad=p.pad, orig_hw=it.shape).clamp(0.0, 1.0)
               for m, p, it in zip(maps, params, items, strict=True)]
        return [m.cpu() for m in out]

    # ------------------------------------------------------------------ data
    def load_data(self, data: str) -> Any:
        from ...data.matte import load_matte_data

        return load_matte_data(str(data))

    def dataset(self, config: Any, files: list[Any], *, split: str, imgsz: int, augment: bool = False,
                train_cfg: Any = None) -> Any:
        """A :class:`~libreyolo.data.matte.MatteDataset`; the training split takes the trainer's flip
        and colour augmentation."""
        from ...data.matte import MatteDataset

        options: dict[str, Any] = {}
        if augment and train_cfg is not None:
            options = {k: getattr(train_cfg, k) for k in ("fliplr", "hsv_h", "hsv_s", "hsv_v")}
        return MatteDataset(files, imgsz=imgsz, augment=augment, prefix=f"{split}: ", **options)

    def check_train_options(self, cfg: Any) -> None:
        if cfg.single_cls:
            raise ConfigError("single_cls=True is for detection datasets; a matte model has no classes")
        if getattr(cfg, "rect", False):
            raise ConfigError("rect=True is for detection datasets (aspect-sorted rectangular batches); a matte "
                              "model trains on square random crops")

    def train_defaults(self, family_imgsz: int, cfg: Any, explicit: set[str]) -> dict[str, Any]:
        """``imgsz`` defaults to the family's and ``project`` to runs/matte."""
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
        from .scoring import MatteScorer

        return MatteScorer(names)
