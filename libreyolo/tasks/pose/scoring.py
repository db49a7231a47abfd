"""Pose scoring: box metrics as for detection, keypoint mAP (OKS) through faster-coco-eval.

- Boxes: :class:`~libreyolo.tasks.detect.scoring.DetectionScorer` (original pixels, COCO bbox
  mAP50-95 / mAP50, precision and recall at the best F1): keys ``mAP50-95``, ``mAP50``,
  ``precision``, ``recall``.
- Keypoints: ``faster_coco_eval`` ``keypoints`` evaluation (OKS thresholds 0.5:0.95, area "all",
  COCO's 20 detections per image) in original pixels: keys ``kpt_mAP50-95``, ``kpt_mAP50``. The
  object area of OKS is the ground-truth box area times 0.53 (Ultralytics' stand-in for the
  segment area COCO uses); ground truth without a labelled keypoint is ignored, as in COCO.
  Sigmas: the dataset's ``kpt_sigmas``, else COCO's for K = 17, else a uniform 0.0669 (COCO's mean)
  (:func:`libreyolo.ops.keypoints.metric_sigmas`).
- fitness: the mean of the box fitness and the keypoint fitness (each ``0.1 * mAP50 + 0.9 * mAP50-95``).
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

import numpy as np  # noqa: F401 - the docstring example uses it
from torch import Tensor

from ...ops.keypoints import metric_sigmas
from ..detect.results import DetMetrics
from ..detect.scoring import DetectionScorer, _ratio_pad, fitness
from . import keypoints_to_original

AREA_FACTOR = 0.53


class PoseScorer:
    """Gathers per-image detections and keypoints; :meth:`result` gives a
    :class:`~libreyolo.tasks.detect.results.DetMetrics` with the keypoint keys added."""

    def __init__(self, names: dict[int, str] | None = None, *, sigmas: Sequence[float] | None = None) -> None:
        self.names = names or {}
        self.boxes = DetectionScorer(self.names)
        self.images: list[dict[str, Any]] = []
        self.sigmas = list(sigmas) if sigmas is not None else None

    def add(self, batch: dict[str, Any], outputs: list[tuple[Tensor, Tensor]], *, input_hw: tuple[int, int]) -> None:
        self.boxes.add(batch, [d for d, _ in outputs], input_hw=input_hw)
        if self.sigmas is None and batch.get("kpt_sigmas") is not None:
            self.sigmas = list(batch["kpt_sigmas"])
        h_in, w_in = input_hw
        bidx = batch["batch_idx"].cpu()
        gt_k = batch["keypoints"].cpu().float()
        k_model = int(outputs[0][1].shape[1]) if outputs else int(gt_k.shape[1])
        if k_model != int(gt_k.shape[1]):
            from ...errors import ConfigError

            raise ConfigError(f"the model predicts {k_model} keypoints per object but the data has {gt_k.shape[1]} "
                              "(kpt_shape); validate on data of the model's kpt_shape, or train the model on this data")
        box_images = self.boxes.images[len(self.boxes.images) - len(outputs):]  # what boxes.add just appended
        for i, ((_, kp), im) in enumerate(zip(outputs, box_images, strict=True)):
            oh, ow = (int(v) for v in batch["ori_shape"][i])
            ratio, pad = _ratio_pad(batch["ratio_pad"][i])
            g = gt_k[bidx == i].clone()
            lab = g[..., 2] > 0
            g[..., 0] *= w_in
            g[..., 1] *= h_in
            g = keypoints_to_original(g, ratio=ratio, pad=pad, orig_hw=(oh, ow))
            g[..., 2] = lab.float() * 2.0
            g[~lab] = 0.0
            p = keypoints_to_original(kp.detach().float().cpu(), ratio=ratio, pad=pad, orig_hw=(oh, ow))
            self.images.append({**im, "gt_kpts": g.numpy(), "pred_kpts": p.numpy()})

    def result(self, *, images: int, speed: dict[str, float], ms_per_image: float, losses: dict[str, float],
               save_dir: Path | None) -> DetMetrics:
        m = self.boxes.result(images=images, speed=speed, ms_per_image=ms_per_image, losses=losses, save_dir=save_dir)
        k = next((im["gt_kpts"].shape[1] for im in self.images if im["gt_kpts"].ndim == 3), 0)
        coco = (keypoint_map(self.images, self.names, metric_sigmas(k, self.sigmas))
                if int(m.get("instances", 0)) and k else {"map": 0.0, "map50": 0.0})
        m["kpt_mAP50-95"], m["kpt_mAP50"] = coco["map"], coco["map50"]
        box_fit = m.get("fitness", 0.0)
        m["fitness"] = 0.5 * (box_fit + fitness({"mAP50": m["kpt_mAP50"], "mAP50-95": m["kpt_mAP50-95"]}))
        return m

    def summary(self, result: DetMetrics) -> str:
        return (result.summary() + f"\n{'keypoints':>16}  mAP50 {result['kpt_mAP50']:.3f}  "
                f"mAP50-95 {result['kpt_mAP50-95']:.3f}")


def keypoint_map(images: list[dict[str, Any]], names: dict[int, str], sigmas: Sequence[float]) -> dict[str, float]:
    """COCO keypoint (OKS) mAP with faster-coco-eval.

    images: per image ``hw`` (h, w), ``gt`` (ndarray[G, 4] xyxy), ``gt_cls`` (ndarray[G]),
    ``gt_kpts`` (ndarray[G, K, 3] x, y, v with v > 0 labelled), ``score`` (ndarray[P]),
    ``pred_cls`` (ndarray[P]), ``pred`` (ndarray[P, 4] xyxy), ``pred_kpts`` (ndarray[P, K, 3]);
    original pixels. Returns {"map", "map50"}.

    Example:
        >>> kp = np.array([[[10.0, 10.0, 2], [30.0, 10.0, 2], [20.0, 30.0, 2]]])
        >>> im = {"hw": (64, 64), "gt": np.array([[10.0, 10.0, 30.0, 30.0]]), "gt_cls": np.array([0]), "gt_kpts": kp,
        ...       "pred": np.array([[10.0, 10.0, 30.0, 30.0]]), "score": np.array([0.9]), "pred_cls": np.array([0]),
        ...       "pred_kpts": kp}
        >>> keypoint_map([im], {0: "a"}, [0.025] * 3)
        {'map': 1.0, 'map50': 1.0}
    """
    from faster_coco_eval import COCO, COCOeval_faster

    quiet: Callable[..., None] = lambda *a, **k: None  # noqa: E731 - silence the package's printing
    gt: dict[str, Any] = {"images": [], "annotations": [],
                          "categories": [{"id": int(c) + 1, "name": n} for c, n in names.items()]}
    dts = []
    for img_id, im in enumerate(images, start=1):
        h, w = im["hw"]
        gt["images"].append({"id": img_id, "height": int(h), "width": int(w)})
        for box, c, kp in zip(im["gt"], im["gt_cls"], im["gt_kpts"], strict=True):
            bw, bh = float(box[2] - box[0]), float(box[3] - box[1])
            flat = [float(v) for row in kp for v in row]
            gt["annotations"].append({"id": len(gt["annotations"]) + 1, "image_id": img_id, "category_id": int(c) + 1,
                                      "bbox": [float(box[0]), float(box[1]), bw, bh], "iscrowd": 0,
                                      "area": bw * bh * AREA_FACTOR, "keypoints": flat,
                                      "num_keypoints": int((kp[:, 2] > 0).sum())})
        for box, s, c, kp in zip(im["pred"], im["score"], im["pred_cls"], im["pred_kpts"], strict=True):
            dts.append({"image_id": img_id, "category_id": int(c) + 1, "score": float(s),
                        "bbox": [float(box[0]), float(box[1]), float(box[2] - box[0]), float(box[3] - box[1])],
                        "keypoints": [float(v) for row in kp for v in row]})
    if not dts or not gt["annotations"]:
        return {"map": 0.0, "map50": 0.0}
    coco_gt = COCO(gt, print_function=quiet)
    coco_dt = coco_gt.loadRes(dts)
    ev = COCOeval_faster(coco_gt, coco_dt, iouType="keypoints", kpt_oks_sigmas=list(sigmas), print_function=quiet)
    ev.evaluate()
    ev.accumulate()
    ev.summarize()
    return {"map": max(float(ev.stats[0]), 0.0), "map50": max(float(ev.stats[1]), 0.0)}
