"""OCR: text regions (quadrilaterals) and their strings (PP-OCR).

Prediction letterboxes as detection does (``rect=True``: the smallest stride-32 rectangle); the
family's chain detects on the network input (captured per shape under ``cuda_graph``), finds the
boxes of the probability map, crops them and reads them (eager). ``conf`` is the DB box threshold:
the mean text probability inside a box (PaddleOCR uses 0.6; the library default 0.25 keeps more).
``angle_cls`` (True / False / None: where the model has one) turns the lines a 0 / 180-degree
angle classifier calls upside down before reading them.
``Results.texts`` (a :class:`~libreyolo.engine.ocr_io.Texts`, built from the per-image dict): ``polygons`` Tensor[n, 4, 2] original
pixels, ``strings`` list[str], ``scores`` (recognition confidence), ``det_scores``, ``angles``
(degrees each line was read turned by) and ``angle_scores``;
``plot()`` draws the boxes and the strings, ``to_json()`` lists them.

Data: ICDAR-2015-style label lines per image (:mod:`libreyolo.data.ocr`); the built-in demo is
``data="text-demo"``. Validation (:mod:`.scoring`) reports detection precision / recall / hmean at
IoU 0.5 and recognition accuracy and normalised edit distance on the ground-truth crops.
"""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import ExitStack, contextmanager
from typing import Any, ClassVar

import torch
from torch import Tensor

from ...errors import ConfigError
from ..base import Task
from ..detect import DetectTask


class OcrTask(Task):
    name: ClassVar[str] = "ocr"
    results_field: ClassVar[str] = "texts"
    project: ClassVar[str] = "runs/ocr"
    val_losses: ClassVar[bool] = False
    metric_keys: ClassVar[tuple[str, ...]] = ("precision", "recall", "hmean", "rec_acc", "norm_edit_dis")

    def __init__(self) -> None:
        from ...data.ocr import collate_ocr

        self.collate = collate_ocr

    # ------------------------------------------------------------------ prediction
    def preprocess(self, items: list[Any], *, imgsz: tuple[int, int], device: torch.device, dtype: torch.dtype,
                   channels_last: bool, rect: bool, stride: int) -> tuple[Tensor, list[Any]]:
        return DetectTask().preprocess(items, imgsz=imgsz, device=device, dtype=dtype, channels_last=channels_last,
                                       rect=rect, stride=stride)

    def network_scope(self, twin: Any, opts: Any, params: list[Any]) -> Any:
        """The family's box threshold (``conf``) and angle classification (``angle_cls``) for the
        call; an exported detector has neither (and refuses ``angle_cls=True``)."""
        angle = getattr(opts, "angle_cls", None)
        if angle and getattr(twin, "angle_classification", None) is None:
            raise ConfigError("angle_cls=True: this model has no angle classifier (an exported detector reads no text)")
        return _scopes(twin, float(opts.conf), angle)

    def outputs(self, twin: Any, raw: Any, *, items: list[Any], params: list[Any], opts: Any, decoded: bool,
                rerun: Any) -> list[Any]:
        outs = twin.postprocess(raw, conf=opts.conf, iou=opts.iou, classes=None, max_det=opts.max_det, agnostic=False)
        result = []
        for o, p, it in zip(outs, params, items, strict=True):
            h, w = it.shape
            poly = (o["polygons"].float().cpu() - torch.tensor(p.pad, dtype=torch.float32)) / float(p.ratio)
            poly[..., 0] = poly[..., 0].clamp(0, w)
            poly[..., 1] = poly[..., 1].clamp(0, h)
            result.append({"texts": {"polygons": poly, "strings": o["texts"], "scores": o["scores"].float().cpu(),
                                     "det_scores": o["det_scores"].float().cpu(), "angles": o.get("angles"),
                                     "angle_scores": o.get("angle_scores")}})
        return result

    # ------------------------------------------------------------------ data
    def load_data(self, data: str) -> Any:
        from ...data.ocr import load_ocr_data

        return load_ocr_data(str(data))

    def dataset(self, config: Any, files: list[Any], *, split: str, imgsz: int, augment: bool = False,
                train_cfg: Any = None) -> Any:
        from ...data.ocr import OcrDataset

        return OcrDataset(files, imgsz=imgsz, prefix=f"{split}: ")

    def check_train_options(self, cfg: Any) -> None:
        if getattr(cfg, "multi_scale", 0):
            raise ConfigError("multi_scale resizes the batch but not its text polygons; train OCR at one size "
                              "(multi_scale=0)")
        for key in ("single_cls", "rect"):
            if getattr(cfg, key, False):
                raise ConfigError(f"{key}=True is for detection datasets; an OCR model trains on square letterboxed images")

    def train_defaults(self, family_imgsz: int, cfg: Any, explicit: set[str]) -> dict[str, Any]:
        changes: dict[str, Any] = {}
        if "imgsz" not in explicit:
            changes["imgsz"] = int(family_imgsz)
        if "project" not in explicit:
            changes["project"] = self.project
        return changes

    # ------------------------------------------------------------------ validation
    def val_outputs(self, model: Any, raw: Any, *, conf: float, iou: float, max_det: int) -> list[tuple[Any, Tensor]]:
        """Per image (the model, its probability map Tensor[1, H, W]): the scorer finds the boxes and
        reads the ground-truth crops."""
        prob = raw[0] if isinstance(raw, (list, tuple)) else raw
        return [(model, prob[b]) for b in range(prob.shape[0])]

    def scorer(self, names: dict[int, str]) -> Any:
        from .scoring import OcrScorer

        return OcrScorer(names)


@contextmanager
def _scopes(twin: Any, conf: float, angle: bool | None) -> Iterator[None]:
    with ExitStack() as stack:
        if (box := getattr(twin, "box_threshold", None)) is not None:
            stack.enter_context(box(conf))
        if (classify := getattr(twin, "angle_classification", None)) is not None:
            stack.enter_context(classify(angle))
        yield
