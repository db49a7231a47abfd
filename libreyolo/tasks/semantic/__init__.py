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

from ..map_task import MapTask
from .maps import to_original


class SemanticTask(MapTask):
    name: ClassVar[str] = "semantic"
    results_field: ClassVar[str] = "semantic"
    project: ClassVar[str] = "runs/semantic"
    metric_keys: ClassVar[tuple[str, ...]] = ("mIoU", "aAcc", "mAcc")

    def __init__(self) -> None:
        from ...data.semantic import collate_semantic

        self.collate = collate_semantic

    def load_data(self, data: str) -> Any:
        from ...data.semantic import load_semantic_data

        return load_semantic_data(str(data))

    def map_dataset(self, config: Any, files: list[Any], *, imgsz: int, augment: bool, prefix: str,
                    **options: Any) -> Any:
        """A :class:`~libreyolo.data.semantic.SemanticDataset`; the training split takes the trainer's
        flip and colour augmentation."""
        from ...data.semantic import SemanticDataset

        return SemanticDataset(files, imgsz=imgsz, nc=config.nc, ignore_index=config.ignore_index, augment=augment,
                               prefix=prefix, **options)

    def scorer(self, names: dict[int, str]) -> Any:
        from .scoring import SemanticScorer

        return SemanticScorer(names)
