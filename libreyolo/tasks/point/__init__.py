"""Point: object centroids (x, y, confidence, class) per image, scored by precision / recall / F1.

Data are detection datasets (Ultralytics YOLO box labels, read and checked by the detection
reader, the same one-line errors; the built-in demo is ``data="shapes"``): each box is reduced
to its centre. Prediction letterboxes as detection does; the network returns per-cell logits
at stride 8 and :func:`~libreyolo.ops.points.decode_points` turns them into points (object
cells above ``conf``, touching cells of one class merged), mapped back to original pixels into
``Results.points``: Tensor[n, 4] float32 ``x, y, conf, cls``. Validation (:mod:`.scoring`)
matches points to ground-truth boxes in original pixels (:mod:`.metrics`: a point inside a box
of its class); fitness is F1.
"""

from __future__ import annotations

from typing import Any, ClassVar

from torch import Tensor

from ...ops.points import unletterbox_points
from ..detect import DetectTask


class PointTask(DetectTask):
    name: ClassVar[str] = "point"
    results_field: ClassVar[str] = "points"
    project: ClassVar[str] = "runs/point"
    tracks: ClassVar[bool] = False
    plots: ClassVar[bool] = False  # the validation pictures draw boxes; a point model has none
    metric_keys: ClassVar[tuple[str, ...]] = ("precision", "recall")

    # ------------------------------------------------------------------ prediction
    def predict_decoded(self, twin: Any, opts: Any) -> bool:
        return False

    def outputs(self, twin: Any, raw: Any, *, items: list[Any], params: list[Any], opts: Any, decoded: bool,
                rerun: Any) -> list[Tensor]:
        pts = twin.postprocess(raw, conf=opts.conf, iou=opts.iou, classes=opts.classes, max_det=opts.max_det,
                               agnostic=False)
        return [unletterbox_points(p, ratio=prm.ratio, pad=prm.pad, orig_hw=it.shape)
                for p, prm, it in zip(pts, params, items, strict=True)]

    # ------------------------------------------------------------------ data
    def train_defaults(self, family_imgsz: int, cfg: Any, explicit: set[str]) -> dict[str, Any]:
        """``imgsz`` defaults to the family's and ``project`` to runs/point."""
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
        from .scoring import PointScorer

        return PointScorer(names)
