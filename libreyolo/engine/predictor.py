"""The prediction pipeline: source -> preprocess -> network -> postprocess -> Results.

Only :meth:`Family.forward` may run inside a CUDA graph; preprocessing (letterbox, normalise)
and postprocessing (decode, NMS, rescale) are eager (SPEC G-2). Preprocessing runs on the
model's device, so on CUDA the letterbox and normalisation are GPU work too.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

import numpy as np
import torch

from ..errors import ConfigError
from ..ops import nms as _nms  # noqa: F401 - import torchvision's kernels before anything is timed
from ..ops.boxes import scale_boxes
from ..ops.letterbox import check_imgsz, letterbox

if TYPE_CHECKING:
    from ..models._base.family import Family
    from .results import Results

logger = logging.getLogger(__name__)


@dataclass(frozen=True, kw_only=True)
class PredictOptions:
    conf: float
    iou: float
    imgsz: tuple[int, int]
    classes: list[int] | None
    max_det: int
    device: torch.device | None
    batch: int
    save: bool
    save_dir: Path | None
    cuda_graph: Any
    amp_dtype: torch.dtype | None
    agnostic_nms: bool
    bgr: bool

    @classmethod
    def build(cls, *, model: Family, conf: float, iou: float, imgsz: Any, classes: Any, max_det: int,
              device: Any, batch: int, save: bool, save_dir: Any, cuda_graph: Any, half: bool,
              agnostic_nms: bool, bgr: bool) -> PredictOptions:
        from ..graphs.runner import check_policy
        from ..models._base.family import select_device

        for key, v in (("conf", conf), ("iou", iou)):
            if isinstance(v, bool) or not isinstance(v, (int, float)) or not 0.0 <= float(v) <= 1.0:
                raise ConfigError(f"{key} must be a number in [0, 1], got {v!r}")
        if isinstance(max_det, bool) or not isinstance(max_det, int) or max_det < 1:
            raise ConfigError(f"max_det must be a positive int, got {max_det!r}")
        if isinstance(batch, bool) or not isinstance(batch, int) or batch < 1:
            raise ConfigError(f"batch must be a positive int, got {batch!r}")
        if classes is not None:
            if isinstance(classes, int):
                classes = [classes]
            if not all(isinstance(c, int) and 0 <= c < model.nc for c in classes):
                raise ConfigError(f"classes must be class ids in [0, {model.nc - 1}], got {classes!r}")
        check_policy(cuda_graph)
        dev = select_device(device) if device is not None else None
        amp = None
        if half:
            target = dev or model.device
            amp = torch.float16 if target.type == "cuda" else torch.bfloat16
        return cls(
            conf=float(conf), iou=float(iou),
            imgsz=check_imgsz(imgsz if imgsz is not None else model.imgsz, stride=model.stride),
            classes=list(classes) if classes is not None else None, max_det=max_det, device=dev,
            batch=batch, save=bool(save), save_dir=Path(save_dir) if save_dir else None,
            cuda_graph=cuda_graph, amp_dtype=amp, agnostic_nms=bool(agnostic_nms), bgr=bool(bgr),
        )


def preprocess(images: list[np.ndarray], imgsz: tuple[int, int], device: torch.device):
    """RGB uint8 HWC images -> (Tensor[B, 3, H, W] float32 in [0, 1] on ``device``, letterbox params)."""
    batch, params = [], []
    for im in images:
        t = torch.from_numpy(np.ascontiguousarray(im)).to(device, non_blocking=True).permute(2, 0, 1)
        boxed, p = letterbox(t, imgsz)
        batch.append(boxed)
        params.append(p)
    x = torch.stack(batch).float().div_(255.0)
    return x, params


def preprocess_classify(images: list[np.ndarray], imgsz: tuple[int, int], device: torch.device) -> torch.Tensor:
    """RGB uint8 HWC images -> Tensor[B, 3, S, S] float32 in [0, 1]: short side resized to
    ``S = min(imgsz)``, central square (the validation transform of :mod:`libreyolo.data.classify`)."""
    from ..data.classify import center_crop

    side = min(imgsz)
    batch = [torch.from_numpy(center_crop(np.ascontiguousarray(im), side)) for im in images]
    return torch.stack(batch).to(device, non_blocking=True).permute(0, 3, 1, 2).float().div_(255.0)


def _sync(device: torch.device) -> None:
    if device.type == "cuda":
        torch.cuda.synchronize(device)


def predict(model: Family, source: Any, opts: PredictOptions) -> Iterator[Results]:
    """Yield one :class:`Results` per image / frame."""
    from .results import Results
    from .sources import load_source

    if opts.device is not None:
        model.to(opts.device)  # drops graphs if the device changes (G-8)
    device = model.device
    model.net.eval()
    save_dir = None
    batches = load_source(source, batch=opts.batch, bgr=opts.bgr)  # validates before any side effect
    if getattr(model, "OUTPUT_KIND", "boxes") == "probs":
        yield from _predict_probs(model, batches, opts)
        return
    for items in batches:
        t0 = time.perf_counter()
        x, params = preprocess([it.image for it in items], opts.imgsz, device)
        _sync(device)
        t1 = time.perf_counter()
        raw = model.forward(x, cuda_graph=opts.cuda_graph, amp_dtype=opts.amp_dtype)
        _sync(device)
        t2 = time.perf_counter()
        dets = model.postprocess(raw, conf=opts.conf, iou=opts.iou, classes=opts.classes,
                                 max_det=opts.max_det, agnostic=opts.agnostic_nms)
        out = []
        for it, det, p in zip(items, dets, params, strict=True):
            det = det.float()
            det[:, :4] = scale_boxes(det[:, :4], ratio=p.ratio, pad=p.pad, orig_shape=it.image.shape[:2])
            out.append(det.cpu())
        t3 = time.perf_counter()
        n = len(items)
        speed = {"preprocess": (t1 - t0) * 1e3 / n, "inference": (t2 - t1) * 1e3 / n,
                 "postprocess": (t3 - t2) * 1e3 / n}
        for it, det in zip(items, out, strict=True):
            r = Results(orig_img=it.image, path=it.path, names=model.names, boxes=det, speed=speed,
                        frame=it.frame)
            if opts.save:
                if save_dir is None:
                    from .results import next_run_dir

                    save_dir = opts.save_dir or next_run_dir(Path("runs") / model.task / "predict")
                r.save(save_dir)
            yield r


def _predict_probs(model: Family, batches: Any, opts: PredictOptions) -> Iterator[Results]:
    """The classification path: center crop -> network -> softmax -> ``Results.probs``."""
    from .results import Results

    device = model.device
    save_dir = None
    for items in batches:
        t0 = time.perf_counter()
        x = preprocess_classify([it.image for it in items], opts.imgsz, device)
        _sync(device)
        t1 = time.perf_counter()
        raw = model.forward(x, cuda_graph=opts.cuda_graph, amp_dtype=opts.amp_dtype)
        _sync(device)
        t2 = time.perf_counter()
        probs = [p.float().cpu() for p in model.postprocess(raw, conf=opts.conf, iou=opts.iou, classes=None,
                                                             max_det=opts.max_det, agnostic=False)]
        t3 = time.perf_counter()
        n = len(items)
        speed = {"preprocess": (t1 - t0) * 1e3 / n, "inference": (t2 - t1) * 1e3 / n,
                 "postprocess": (t3 - t2) * 1e3 / n}
        for it, p in zip(items, probs, strict=True):
            r = Results(orig_img=it.image, path=it.path, names=model.names, probs=p, speed=speed, frame=it.frame)
            if opts.save:
                if save_dir is None:
                    from .results import next_run_dir

                    save_dir = opts.save_dir or next_run_dir(Path("runs") / model.task / "predict")
                r.save(save_dir)
            yield r
