"""Classification: class probabilities per image, scored by top-1 / top-5 accuracy.

Prediction and validation use the validation transform of :mod:`libreyolo.data.classify`
(short side resized, central square); datasets are ImageFolder layouts.
"""

from __future__ import annotations

from typing import Any, ClassVar

import numpy as np
import torch
from torch import Tensor

from ...errors import ConfigError
from ..base import Task, augment_options, run_defaults, to_host
from .scoring import ClassifyScorer


class ClassifyTask(Task):
    name: ClassVar[str] = "classify"
    results_field: ClassVar[str] = "probs"
    project: ClassVar[str] = "runs/classify"
    drop_partial_batch: ClassVar[bool] = True  # BatchNorm after global pooling cannot train on one image
    metric_keys: ClassVar[tuple[str, ...]] = ("top1", "top5")

    def __init__(self) -> None:
        from ...data.classify import collate_classify

        self.collate = collate_classify

    # ------------------------------------------------------------------ prediction
    def preprocess(self, items: list[Any], *, imgsz: tuple[int, int], device: torch.device, dtype: torch.dtype,
                   channels_last: bool, rect: bool, stride: int) -> tuple[Tensor, list[Any]]:
        x = preprocess_classify([it.image for it in items], imgsz, device, dtype=dtype, channels_last=channels_last)
        return x, [None] * len(items)

    def outputs(self, twin: Any, raw: Any, *, items: list[Any], params: list[Any], opts: Any, decoded: bool,
                rerun: Any) -> list[Tensor]:
        return to_host(twin.postprocess(raw, conf=opts.conf, iou=opts.iou, classes=None, max_det=opts.max_det,
                                        agnostic=False))

    # ------------------------------------------------------------------ data
    def load_data(self, data: str) -> Any:
        from ...data.classify import load_classify_data

        return load_classify_data(str(data))

    def dataset(self, config: Any, files: list[Any], *, split: str, imgsz: int, augment: bool = False,
                train_cfg: Any = None) -> Any:
        """A :class:`~libreyolo.data.classify.ClassifyDataset`; the training split takes the
        trainer's flip and colour augmentation."""
        from ...data.classify import ClassifyDataset

        options = augment_options(train_cfg, ("fliplr", "hsv_h", "hsv_s", "hsv_v")) if augment else {}
        return ClassifyDataset(files, imgsz=imgsz, augment=augment, prefix=f"{split}: ", **options)

    def check_train_options(self, cfg: Any) -> None:
        if cfg.single_cls:
            raise ConfigError("single_cls=True is for detection datasets; a classifier needs its classes")
        if cfg.fraction < 1:
            raise ConfigError("fraction < 1 is for detection datasets; for a classifier, list fewer images")
        if getattr(cfg, "rect", False):
            raise ConfigError("rect=True is for detection datasets (aspect-sorted rectangular batches); a "
                              "classifier trains on square crops")

    def train_defaults(self, family_imgsz: int, cfg: Any, explicit: set[str]) -> dict[str, Any]:
        """``imgsz`` defaults to the family's (224) and ``project`` to runs/classify."""
        return run_defaults(self.project, explicit, family_imgsz)

    # ------------------------------------------------------------------ validation
    def val_outputs(self, model: Any, raw: Any, *, conf: float, iou: float, max_det: int) -> Tensor:
        return torch.stack(model.postprocess(raw, conf=0.0, iou=0.0, classes=None, max_det=1, agnostic=False))

    def scorer(self, names: dict[int, str]) -> ClassifyScorer:
        return ClassifyScorer(names)


def preprocess_classify(images: list[np.ndarray], imgsz: tuple[int, int], device: torch.device, *,
                        dtype: torch.dtype = torch.float32, channels_last: bool = False) -> torch.Tensor:
    """RGB uint8 HWC images -> Tensor[B, 3, S, S] ``dtype`` in [0, 1]: short side resized to
    ``S = min(imgsz)``, central square (the validation transform of :mod:`libreyolo.data.classify`)."""
    from ...data.classify import center_crop

    side = min(imgsz)
    batch = [torch.from_numpy(center_crop(np.ascontiguousarray(im), side)) for im in images]
    fmt = torch.channels_last if channels_last else torch.contiguous_format
    x = torch.stack(batch).to(device, non_blocking=True).permute(0, 3, 1, 2)
    return x.to(dtype, memory_format=fmt).div_(255.0)
