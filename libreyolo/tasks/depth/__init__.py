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

import torch
from torch import Tensor

from ...errors import ConfigError
from ..base import Task
from .maps import to_original


class DepthTask(Task):
    name: ClassVar[str] = "depth"
    results_field: ClassVar[str] = "depth"
    project: ClassVar[str] = "runs/depth"
    val_losses: ClassVar[bool] = True  # the validation depth maps are the training targets too (letterboxed)

    def __init__(self) -> None:
        from ...data.depth import collate_depth

        self.collate = collate_depth

    # ------------------------------------------------------------------ prediction
    def preprocess(self, items: list[Any], *, imgsz: tuple[int, int], device: torch.device, dtype: torch.dtype,
                   channels_last: bool, rect: bool, stride: int) -> tuple[Tensor, list[Any]]:
        from ..detect.preprocess import preprocess

        bgr = device.type == "cuda" and all(it.rgb is None for it in items)  # swap channels on the GPU
        pixels = [it.bgr for it in items] if bgr else [it.image for it in items]
        return preprocess(pixels, imgsz, device, dtype=dtype, channels_last=channels_last, rect=rect,
                          stride=stride, bgr=bgr)

    def outputs(self, twin: Any, raw: Any, *, items: list[Any], params: list[Any], opts: Any, decoded: bool,
                rerun: Any) -> list[dict[str, Any]]:
        """Per image ``{"depth": Tensor[H, W], "depth_kind": ...}`` (the family's ``depth_kind``); a
        ``"metric"`` map is rescaled by the letterbox ratio to the original image's focal length."""
        kind = getattr(getattr(twin, "family", twin), "depth_kind", None)
        maps = twin.postprocess(raw, conf=opts.conf, iou=opts.iou, classes=None, max_det=opts.max_det,
                                agnostic=False)
        out = [to_original(m, input_hw=p.out_shape, ratio=p.ratio, pad=p.pad, orig_hw=it.shape)
               * (float(p.ratio) if kind == "metric" else 1.0) for m, p, it in zip(maps, params, items, strict=True)]
        return [{"depth": m.cpu(), "depth_kind": kind} for m in out]

    # ------------------------------------------------------------------ data
    def load_data(self, data: str) -> Any:
        from ...data.depth import load_depth_data

        return load_depth_data(str(data))

    def dataset(self, config: Any, files: list[Any], *, split: str, imgsz: int, augment: bool = False,
                train_cfg: Any = None) -> Any:
        """A :class:`~libreyolo.data.depth.DepthDataset`; the training split takes the trainer's flip
        and colour augmentation."""
        from ...data.depth import DepthDataset

        options: dict[str, Any] = {}
        if augment and train_cfg is not None:
            options = {k: getattr(train_cfg, k) for k in ("fliplr", "hsv_h", "hsv_s", "hsv_v")}
        return DepthDataset(files, imgsz=imgsz, depth_scale=config.depth_scale, max_depth=config.max_depth,
                            augment=augment, prefix=f"{split}: ", **options)

    def check_train_options(self, cfg: Any) -> None:
        if cfg.single_cls:
            raise ConfigError("single_cls=True is for detection datasets; a depth model has no classes")
        if getattr(cfg, "rect", False):
            raise ConfigError("rect=True is for detection datasets (aspect-sorted rectangular batches); a depth "
                              "model trains on square random crops")

    def train_defaults(self, family_imgsz: int, cfg: Any, explicit: set[str]) -> dict[str, Any]:
        """``imgsz`` defaults to the family's and ``project`` to runs/depth."""
        changes: dict[str, Any] = {}
        if "imgsz" not in explicit:
            changes["imgsz"] = int(family_imgsz)
        if "project" not in explicit:
            changes["project"] = self.project
        return changes

    # ------------------------------------------------------------------ validation
    def val_outputs(self, model: Any, raw: Any, *, conf: float, iou: float, max_det: int) -> list[Tensor]:
        """The maps the scorer aligns in disparity: a family that predicts depth (``PREDICTS ==
        "depth"``) is scored on ``1 / depth`` (a positive scale of depth is a scale of disparity)."""
        maps = model.postprocess(raw, conf=conf, iou=iou, classes=None, max_det=max_det, agnostic=False)
        if getattr(model, "PREDICTS", "disparity") == "depth":
            maps = [1.0 / m.float().clamp(min=1e-6) for m in maps]
        return maps

    def scorer(self, names: dict[int, str]) -> Any:
        from .scoring import DepthScorer

        return DepthScorer(names)
