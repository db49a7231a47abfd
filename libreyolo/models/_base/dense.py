"""Shared declarations of the dense YOLO-style detection families (yolo9, yolox, yolo7, rtmdet).

Each of them predicts per grid cell on three levels (strides 8, 16, 32), exports with dynamic
batch and spatial axes and decodes its raw head outputs in its own ``postprocess.py`` (anchors,
thresholds, NMS). This base holds what they declare identically; capability flags stay with each
family, backed by its parity rows (DESIGN convention 2).
"""

from __future__ import annotations

import importlib
from collections.abc import Callable
from typing import Any, ClassVar

from torch import Tensor

from .family import Family


class DenseFamily(Family):
    """A dense detector: by default three output levels ``raw_p3``, ``raw_p4``, ``raw_p5``
    (strides 8, 16, 32; a family with a stride-4 level names four), each Tensor[B, C, H / s, W / s];
    the family's ``postprocess.postprocess`` turns them into detections; :meth:`postprocess_fn`
    finds that function."""

    TASKS: ClassVar[tuple[str, ...]] = ("detect",)
    DEFAULT_IMGSZ: ClassVar[int] = 640
    STRIDE: ClassVar[int] = 32
    OUTPUT_NAMES: ClassVar[tuple[str, ...]] = ("raw_p3", "raw_p4", "raw_p5")  # strides 8, 16, 32
    EXPORT_DYNAMIC_AXES: ClassVar[tuple[str, ...]] = ("batch", "height", "width")

    @classmethod
    def postprocess_fn(cls) -> Callable[..., list[Tensor]]:
        """The family's ``postprocess(raw, *, net, conf, iou, classes, max_det, agnostic)``: the
        function of that name in the ``postprocess.py`` beside the class that subclasses
        DenseFamily (imported on first use, as the family's other modules). A family whose
        function lives elsewhere overrides this."""
        family = next((k for k in cls.__mro__ if DenseFamily in k.__bases__), None)
        if family is None:
            raise NotImplementedError(f"{cls.FAMILY or cls.__name__} names no postprocess function")
        package = family.__module__.rpartition(".")[0]
        return importlib.import_module(f"{package}.postprocess").postprocess

    def postprocess(self, raw: Any, *, conf: float, iou: float, classes: list[int] | None,
                    max_det: int, agnostic: bool) -> list[Tensor]:
        """raw (one Tensor[B, C, h, w] per level) -> per image Tensor[n, 6] (x1, y1, x2, y2 in
        input pixels, score, class id) float32, by decreasing score, ``n <= max_det``."""
        return self.postprocess_fn()(raw, net=self.net, conf=conf, iou=iou, classes=classes, max_det=max_det,
                                     agnostic=agnostic)
