"""Pose: boxes (x1, y1, x2, y2, score, class) with K keypoints each, scored by box mAP and
keypoint (OKS) mAP.

The task knows nothing of the network: a pose family's postprocess returns per image
Tensor[n, 6 + 3 K] (the detection, then x, y in input pixels and a visibility score per
keypoint) and names its keypoint count ``nkpt``. Prediction letterboxes exactly as detection
does; the network is the capturable part; NMS and the keypoint decode are eager (the family's
postprocess). ``Results.boxes`` holds the detections in original pixels, ``Results.keypoints``
(:class:`~libreyolo.engine.keypoints.Keypoints`) Tensor[N, K, 3] in original pixels, clipped to
the image, with the family's skeleton (the one the training data gave) for plotting.

What a pose family supplies (the contract a second family, e.g. YOLO-NAS-Pose, implements):
``TASKS = ("pose",)``, ``OUTPUT_KIND = "keypoints"``; ``nkpt`` (keypoints per object) and
``skeleton`` (pairs of keypoint indices, or ``None``) attributes; ``build_net(..., nkpt=,
skeleton=)`` and ``set_arch(nkpt=, skeleton=)`` with both in its ``arch`` (so that training
rebuilds the head for the data's K and checkpoints / exports keep it); ``postprocess`` rows as
above; a criterion reading the batch of :func:`~libreyolo.data.pose.collate_pose` (``keypoints``
Tensor[N, K, 3], x, y normalised to the input, v). Nothing here names a family.

Datasets are YOLO layouts with pose labels and ``kpt_shape`` / ``flip_idx`` in the yaml
(:mod:`libreyolo.data.pose`); the built-in demo is ``data="shapes-pose"``. Training on data whose
``kpt_shape`` differs from the model's rebuilds the head (:meth:`PoseTask.data_arch`).
Validation (:mod:`.scoring`): box mAP as for detection, keypoint mAP50-95 / mAP50 (OKS) through
faster-coco-eval's ``keypoints`` mode; fitness is the mean of the box and keypoint fitness.
"""

from __future__ import annotations

from typing import Any, ClassVar

import torch
from torch import Tensor

from ...errors import ConfigError
from ...ops.boxes import scale_boxes
from ..base import LetterboxTask, augment_options, run_defaults


def keypoints_to_original(kpts: Tensor, *, ratio: float | tuple[float, float], pad: tuple[float, float],
                          orig_hw: tuple[int, int]) -> Tensor:
    """Keypoints (Tensor[n, K, 3] x, y in letterboxed-input pixels, score) -> original-image
    pixels (through ``ratio`` and ``pad`` of the letterbox), clipped to the image; a new tensor.

    Example:
        >>> k = torch.tensor([[[20.0, 30.0, 0.9]]])
        >>> keypoints_to_original(k, ratio=0.5, pad=(4.0, 6.0), orig_hw=(100, 100)).tolist()
        [[[32.0, 48.0, 0.8999999761581421]]]
    """
    rw, rh = (ratio, ratio) if isinstance(ratio, (int, float)) else ratio
    out = kpts.clone().float()
    out[..., 0] = ((out[..., 0] - pad[0]) / rw).clamp(0, orig_hw[1])
    out[..., 1] = ((out[..., 1] - pad[1]) / rh).clamp(0, orig_hw[0])
    return out


def _nkpt(model: Any) -> int:
    """Keypoints per object of a model, its prepared twin or an exported backend."""
    for obj in (model, getattr(model, "family", None), getattr(model, "net", None)):
        n = getattr(obj, "nkpt", None) if obj is not None else None
        if n is not None:
            return int(n)
    raise ConfigError(f"{getattr(model, 'FAMILY', model)!r} names no keypoint count (nkpt)")


def _skeleton(model: Any) -> list[list[int]] | None:
    for obj in (model, getattr(model, "family", None)):
        if obj is not None and hasattr(obj, "skeleton"):
            return obj.skeleton
    return getattr(getattr(model, "net", None), "skeleton", None)


class PoseTask(LetterboxTask):
    name: ClassVar[str] = "pose"
    results_field: ClassVar[str] = "keypoints"  # outputs() gives {"boxes": ..., "keypoints": ...} per image
    project: ClassVar[str] = "runs/pose"
    val_losses: ClassVar[bool] = True
    plots: ClassVar[bool] = True  # val / train pictures with keypoints and the skeleton (engine/val_plots)
    metric_keys: ClassVar[tuple[str, ...]] = ("precision", "recall", "mAP50", "mAP50-95", "kpt_mAP50", "kpt_mAP50-95")

    def __init__(self) -> None:
        from ...data.pose import collate_pose

        self.collate = collate_pose

    # ------------------------------------------------------------------ prediction (LetterboxTask.preprocess)
    def outputs(self, twin: Any, raw: Any, *, items: list[Any], params: list[Any], opts: Any, decoded: bool,
                rerun: Any) -> list[dict[str, Any]]:
        dets = twin.postprocess(raw, conf=opts.conf, iou=opts.iou, classes=opts.classes, max_det=opts.max_det,
                                agnostic=opts.agnostic_nms)
        k = _nkpt(twin)
        skeleton = _skeleton(twin)
        out = []
        for det, p, it in zip(dets, params, items, strict=True):
            det = det.float().cpu()
            boxes = det[:, :6].clone()
            boxes[:, :4] = scale_boxes(boxes[:, :4], ratio=p.ratio, pad=p.pad, orig_shape=it.shape)
            kpts = keypoints_to_original(det[:, 6:].reshape(-1, k, 3), ratio=p.ratio, pad=p.pad, orig_hw=it.shape)
            out.append({"boxes": boxes, "keypoints": {"data": kpts, "skeleton": skeleton}})
        return out

    # ------------------------------------------------------------------ data
    def load_data(self, data: str) -> Any:
        from ...data.pose import load_pose_data

        return load_pose_data(str(data))

    def data_arch(self, config: Any) -> dict[str, Any]:
        """The architecture options the data asks of the model: ``nkpt`` (K of ``kpt_shape``) and
        the ``skeleton`` to draw."""
        out: dict[str, Any] = {"nkpt": int(config.kpt_shape[0])}
        if config.skeleton:
            out["skeleton"] = config.skeleton
        return out

    def dataset(self, config: Any, files: list[Any], *, split: str, imgsz: int, augment: bool = False,
                train_cfg: Any = None) -> Any:
        """A :class:`~libreyolo.data.pose.PoseDataset`; the training split takes the trainer's scale
        (``1 +- scale``), mosaic (closed for the last ``close_mosaic`` epochs), mixup, affine (degrees,
        translate, shear, perspective), flips (horizontal
        ones through the yaml's ``flip_idx``) and colour augmentation; ``single_cls`` and ``rect``
        (both splits)."""
        from ...data.pose import PoseDataset

        keys = ("fliplr", "flipud", "hsv_h", "hsv_s", "hsv_v", "mosaic", "mixup", "degrees", "translate", "shear",
                "perspective")
        options = augment_options(train_cfg, keys, jitter_scale=True) if augment else {}
        for key in ("single_cls", "rect"):  # rect: aspect-sorted, rectangular items
            if train_cfg is not None and getattr(train_cfg, key, False):
                options[key] = True
        labels = config.pose_labels(split, files, prefix=f"{split}: ") if hasattr(config, "pose_labels") else None
        return PoseDataset(files, imgsz=imgsz, nc=config.nc, kpt_shape=config.kpt_shape, flip_idx=config.flip_idx,
                           kpt_sigmas=config.kpt_sigmas, augment=augment, prefix=f"{split}: ", labels=labels,
                           **options)

    def train_defaults(self, family_imgsz: int, cfg: Any, explicit: set[str]) -> dict[str, Any]:
        """``project`` defaults to runs/pose."""
        return run_defaults(self.project, explicit)

    # ------------------------------------------------------------------ validation
    def val_outputs(self, model: Any, raw: Any, *, conf: float, iou: float, max_det: int) -> list[tuple[Tensor, Tensor]]:
        """Per image (detections Tensor[n, 6] in input pixels, keypoints Tensor[n, K, 3] input pixels, score)."""
        dets = model.postprocess(raw, conf=conf, iou=iou, classes=None, max_det=max_det, agnostic=False)
        k = _nkpt(model)
        return [(d[:, :6], d[:, 6:].reshape(-1, k, 3)) for d in dets]

    def scorer(self, names: dict[int, str]) -> Any:
        from .scoring import PoseScorer

        return PoseScorer(names)

    def plot_rows(self, output: tuple[Tensor, Tensor]) -> Any:
        """(detections Tensor[n, 6], keypoints Tensor[n, K, 3]) -> ndarray[n, 6 + 3K] for ``val_batch``."""
        det, kp = output
        return torch.cat([det[:, :6].float(), kp.float().reshape(len(kp), -1)], 1).detach().cpu().numpy()
