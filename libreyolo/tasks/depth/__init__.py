"""Monocular depth: one relative depth value per pixel, scored by AbsRel, RMSE and delta1.

Prediction letterboxes exactly as detection does (aspect kept, 114 grey padding, the input a
multiple of the family's 14 px stride; a single image runs at the smallest such rectangle with
``rect=True``), the network returns a map at its input size, and :func:`~.maps.to_original`
turns each into ``Results.depth``: Tensor[H, W] float32 at the original image size (padding cut
off, resized bilinearly). The values are what the network predicts: **relative inverse depth**
(larger = nearer, up to a scale and shift) for the Depth Anything models. Datasets are image
folders with a 16-bit PNG or ``.npy`` depth map per image (:mod:`libreyolo.data.depth`); the
built-in demo is ``data="shapes-depth"``. Validation aligns each prediction to the ground truth
(least-squares scale and shift in disparity) and scores it in original pixels (:mod:`.scoring`);
fitness is delta1.
"""

from __future__ import annotations

from typing import Any, ClassVar

from ..map_task import MapTask
from .maps import to_original


class DepthTask(MapTask):
    name: ClassVar[str] = "depth"
    results_field: ClassVar[str] = "depth"
    project: ClassVar[str] = "runs/depth"
    model_noun: ClassVar[str] = "a depth model"
    single_cls_why: ClassVar[str] = "has no classes"
    map_to_original = staticmethod(to_original)
    metric_keys: ClassVar[tuple[str, ...]] = ("abs_rel", "rmse", "delta1")

    def __init__(self) -> None:
        from ...data.depth import collate_depth

        self.collate = collate_depth

    def outputs(self, twin: Any, raw: Any, **kw: Any) -> list[dict[str, Any]]:
        """Per image ``{"depth": Tensor[H, W], "depth_kind": ...}``: :class:`MapTask`'s map and the
        family's ``depth_kind``; a ``"metric"`` map is multiplied by the letterbox ratio, so that the
        original image's focal length converts it (:mod:`libreyolo.models.depth_anything3.metric`)."""
        kind = getattr(getattr(twin, "family", twin), "depth_kind", None)
        maps = super().outputs(twin, raw, **kw)
        scales = [float(p.ratio) if kind == "metric" else 1.0 for p in kw["params"]]
        return [{"depth": m * s, "depth_kind": kind} for m, s in zip(maps, scales, strict=True)]

    def load_data(self, data: str) -> Any:
        from ...data.depth import load_depth_data

        return load_depth_data(str(data))

    def map_dataset(self, config: Any, files: list[Any], *, imgsz: int, augment: bool, prefix: str,
                    **options: Any) -> Any:
        """A :class:`~libreyolo.data.depth.DepthDataset`; the training split takes the trainer's flip
        and colour augmentation."""
        from ...data.depth import DepthDataset

        return DepthDataset(files, imgsz=imgsz, depth_scale=config.depth_scale, max_depth=config.max_depth,
                            augment=augment, prefix=prefix, **options)

    def val_outputs(self, model: Any, raw: Any, *, conf: float, iou: float, max_det: int) -> list[Any]:
        """The maps the scorer aligns in disparity: a family that predicts depth (``PREDICTS ==
        "depth"``) is scored on ``1 / depth`` (a positive scale of depth is a scale of disparity)."""
        maps = super().val_outputs(model, raw, conf=conf, iou=iou, max_det=max_det)
        if getattr(model, "PREDICTS", "disparity") == "depth":
            maps = [1.0 / m.float().clamp(min=1e-6) for m in maps]
        return maps

    def scorer(self, names: dict[int, str]) -> Any:
        from .scoring import DepthScorer

        return DepthScorer(names)
