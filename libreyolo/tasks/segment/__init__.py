"""Instance segmentation: boxes (x1, y1, x2, y2, score, class) with one binary mask each, scored
by box and mask COCO mAP.

Prediction letterboxes exactly as detection does; the network (prototypes included) is the
capturable part, and everything after it is eager: NMS on the boxes (the family's postprocess
keeps each detection's mask coefficients), then mask assembly (:mod:`.masks`):
``sigmoid(coefficients @ prototypes)`` zeroed outside the box, upsampled to the network input,
padding cut, resized to the original image and thresholded at 0.5. ``Results.boxes`` holds the
detections in original pixels and ``Results.masks`` (:class:`~libreyolo.engine.masks.Masks`) the
masks, Tensor[N, H, W] bool at the original image size, with their polygons.

Datasets are YOLO layouts with polygon labels (:mod:`libreyolo.data.segment`); the built-in demo
is ``data="shapes-seg"``. Validation (:mod:`.scoring`): box mAP in original pixels as for
detection, mask mAP50-95 / mAP50 through faster-coco-eval's ``segm`` mode at the prototype
resolution (a quarter of the letterboxed input); fitness is the mean of the box and mask fitness.
"""

from __future__ import annotations

from typing import Any, ClassVar

import torch.nn.functional as F
from torch import Tensor

from ...ops.boxes import scale_boxes
from ..base import LetterboxTask, augment_options, run_defaults
from .masks import to_original


class SegmentTask(LetterboxTask):
    name: ClassVar[str] = "segment"
    results_field: ClassVar[str] = "masks"  # outputs() gives {"boxes": ..., "masks": ...} per image
    project: ClassVar[str] = "runs/segment"
    val_losses: ClassVar[bool] = True
    metric_keys: ClassVar[tuple[str, ...]] = ("precision", "recall", "mAP50", "mAP50-95", "mask_mAP50", "mask_mAP50-95")

    def __init__(self) -> None:
        from ...data.segment import collate_segment

        self.collate = collate_segment

    # ------------------------------------------------------------------ prediction (LetterboxTask.preprocess)
    def outputs(self, twin: Any, raw: Any, *, items: list[Any], params: list[Any], opts: Any, decoded: bool,
                rerun: Any) -> list[dict[str, Tensor]]:
        dets = twin.postprocess(raw, conf=opts.conf, iou=opts.iou, classes=opts.classes, max_det=opts.max_det,
                                agnostic=opts.agnostic_nms)
        proto = raw[-1]
        assemble = _masks_fn(twin)
        out = []
        for b, (det, p, it) in enumerate(zip(dets, params, items, strict=True)):
            probs = assemble(proto[b], det, input_hw=tuple(p.out_shape))
            masks = to_original(probs, input_hw=tuple(p.out_shape), ratio=p.ratio, pad=p.pad, orig_hw=it.shape)
            boxes = det[:, :6].float().cpu()
            boxes[:, :4] = scale_boxes(boxes[:, :4], ratio=p.ratio, pad=p.pad, orig_shape=it.shape)
            out.append({"boxes": boxes, "masks": masks.cpu()})
        return out

    # ------------------------------------------------------------------ data
    def load_data(self, data: str) -> Any:
        from ...data.segment import load_segment_data

        return load_segment_data(str(data))

    def dataset(self, config: Any, files: list[Any], *, split: str, imgsz: int, augment: bool = False,
                train_cfg: Any = None) -> Any:
        """A :class:`~libreyolo.data.segment.SegmentDataset`; the training split takes the trainer's
        mosaic, mixup, scale (``1 +- scale``), affine (degrees, translate, shear, perspective), flip and
        colour augmentation; ``single_cls`` and ``rect`` (both splits)."""
        from ...data.segment import SegmentDataset
        from ...errors import DatasetError

        if getattr(config, "coco", {}).get(split) is not None:
            raise DatasetError(f"{split}: COCO JSON labels are not read for segmentation yet; write Ultralytics "
                               "polygon label files (labels/<split>/<image>.txt, 'cls x1 y1 x2 y2 ...')")
        keys = ("fliplr", "flipud", "hsv_h", "hsv_s", "hsv_v", "mosaic", "mixup", "degrees", "translate", "shear",
                "perspective")
        options = augment_options(train_cfg, keys, jitter_scale=True) if augment else {}
        if train_cfg is not None and getattr(train_cfg, "single_cls", False):
            options["single_cls"] = True
        if train_cfg is not None and getattr(train_cfg, "rect", False):  # aspect-sorted, rectangular items
            options["rect"] = True
        return SegmentDataset(files, imgsz=imgsz, nc=config.nc, augment=augment, prefix=f"{split}: ", **options)

    def train_defaults(self, family_imgsz: int, cfg: Any, explicit: set[str]) -> dict[str, Any]:
        """``project`` defaults to runs/segment."""
        return run_defaults(self.project, explicit)

    # ------------------------------------------------------------------ validation
    def val_outputs(self, model: Any, raw: Any, *, conf: float, iou: float, max_det: int) -> list[tuple[Tensor, Tensor]]:
        """Per image (detections Tensor[n, 6] in input pixels, masks Tensor[n, h/4, w/4] bool at the
        dataset's mask resolution, a quarter of the input). The input size is the prototypes' size
        times their stride (the family's ``MASK_FEAT_STRIDE``, 4 where it declares none); masks
        assembled at another resolution are resized to the quarter grid before the threshold."""
        from ...data.segment import MASK_RATIO

        dets = model.postprocess(raw, conf=conf, iou=iou, classes=None, max_det=max_det, agnostic=False)
        proto = raw[-1]
        s = _proto_stride(model)
        hw = (int(proto.shape[2]) * s, int(proto.shape[3]) * s)
        grid = (hw[0] // MASK_RATIO, hw[1] // MASK_RATIO)
        assemble = _masks_fn(model)
        out = []
        for b, d in enumerate(dets):
            probs = assemble(proto[b], d, input_hw=hw)
            if tuple(probs.shape[1:]) != grid:
                probs = (F.interpolate(probs[None].float(), size=grid, mode="bilinear", align_corners=False)[0]
                         if probs.shape[0] else probs.new_zeros((0, *grid)))
            out.append((d[:, :6], probs > 0.5))
        return out

    def scorer(self, names: dict[int, str]) -> Any:
        from .scoring import SegmentScorer

        return SegmentScorer(names)


def _proto_stride(model: Any) -> int:
    """The stride of a model's last raw output (the prototypes / mask features): the family's
    ``MASK_FEAT_STRIDE`` (a model, its prepared twin or an exported backend), else 4."""
    for owner in (model, getattr(model, "family", None)):
        s = getattr(owner, "MASK_FEAT_STRIDE", None)
        if s:
            return int(s)
    return 4


def _masks_fn(model: Any) -> Any:
    """The family's mask assembly (``masks(proto, det, input_hw=)``) of a model, its prepared twin
    or an exported backend (which keeps the family beside the runtime)."""
    fn = getattr(model, "masks", None)
    return fn if fn is not None else model.family.masks
