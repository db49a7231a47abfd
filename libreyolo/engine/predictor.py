"""The prediction pipeline: source -> preprocess -> network -> postprocess -> Results.

The network runs as the model's prepared twin (fused, cast once to half precision when
``half=True``, channels-last where it wins: :mod:`libreyolo.models._base.inference`). For a
family with a captured decode (``DECODE_TOPK``) the network *and* the decode to a fixed number of
sorted candidates are one CUDA graph; only the data-dependent rest (threshold to a variable
count, NMS, ``max_det``) runs eagerly on those candidates after one device-to-host copy per batch
(SPEC G-2: NMS is never captured). Preprocessing runs on the model's device: one uint8 upload per
batch of same-shaped images, then resize/pad/normalise there; single images are letterboxed to
the smallest stride-multiple rectangle (``rect=True``, default).
"""

from __future__ import annotations

import logging
import time
from collections.abc import Iterator, Mapping
from dataclasses import dataclass, field, fields, replace
from pathlib import Path
from typing import TYPE_CHECKING, Any, ClassVar, Literal

import torch
from torch import Tensor

from ..errors import ConfigError, check_keys
from ..ops import nms as _nms  # noqa: F401 - import torchvision's kernels before anything is timed
from ..ops.letterbox import (
    check_imgsz,
)
from .results import Results

if TYPE_CHECKING:
    from ..models._base.family import Family

logger = logging.getLogger(__name__)


@dataclass(frozen=True, kw_only=True)
class PredictOptions:
    """The keywords of ``model.predict()`` / ``model.track()``: the one definition of their names,
    defaults and help (``Model.predict``'s signature and ``libreyolo predict`` are checked against
    these fields by tests/unit/engine/test_predict_options.py and tests/unit/cli).

    Built as the user gives the values (``PredictOptions(conf=0.4, imgsz=640)``); :meth:`resolve`
    (or :meth:`build`) validates them against a model and returns the options the pipeline runs
    with: ``imgsz`` an ``(h, w)`` tuple of stride multiples (the model's when None), ``device`` a
    ``torch.device`` (None: stay where the model is), ``save_dir`` a ``Path`` or None, ``classes``
    a list or None.

    Example:
        >>> PredictOptions().conf, PredictOptions(imgsz=640).imgsz
        (0.25, 640)
    """

    conf: float = field(default=0.25, metadata={"help": "confidence threshold in [0, 1]"})
    iou: float = field(default=0.7, metadata={"help": "NMS IoU threshold in [0, 1]"})
    imgsz: int | tuple[int, int] | None = field(default=None, metadata={"help": "input size: 640 or h,w (default: the model's)"})
    classes: int | list[int] | None = field(default=None, metadata={"help": "keep only these class ids, e.g. 0,2"})
    max_det: int = field(default=300, metadata={"help": "most detections per image"})
    device: str | torch.device | None = field(default=None, metadata={"help": "cpu, cuda, 0, cuda:1 (default: CUDA if present)"})
    batch: int = field(default=1, metadata={"help": "images per forward pass"})
    save: bool = field(default=False, metadata={"help": "write annotated images"})
    save_dir: str | Path | None = field(default=None, metadata={"help": "where to save (default: runs/<task>/predict<N>)"})
    cuda_graph: Literal[False, True, "auto"] = field(default=False, metadata={"help": "CUDA-graph replay: false, true, or auto"})
    half: bool = field(default=False, metadata={"help": "half precision (fp16 on CUDA, bf16 on CPU)"})
    agnostic_nms: bool = field(default=False, metadata={"help": "class-agnostic NMS"})
    bgr: bool = field(default=True, metadata={"help": "numpy array sources are BGR (OpenCV order); false: RGB"})
    fuse: bool = field(default=True, metadata={"help": "run a fused copy of the model (BatchNorm folded)"})
    rect: bool = field(default=True, metadata={"help": "letterbox to the smallest stride-multiple rectangle (false: the square imgsz)"})
    vid_stride: int = field(default=1, metadata={"help": "read every n-th video/stream frame"})
    save_txt: bool = field(default=False, metadata={"help": "write YOLO label lines under labels/"})
    save_conf: bool = field(default=False, metadata={"help": "add the confidence to save_txt lines"})
    save_crop: bool = field(default=False, metadata={"help": "write each box's crop under crops/<class>/"})
    line_width: int | None = field(default=None, metadata={"help": "box outline width in pixels (default: scaled)"})
    show: bool = field(default=False, metadata={"help": "show results in a window (needs a display)"})
    verbose: bool = field(default=False, metadata={"help": "one line per image: objects found, milliseconds"})
    points: Any = field(default=None, metadata={"help": "prompt task: points [[x, y], ...] in image pixels"})
    labels: Any = field(default=None, metadata={"help": "prompt task: point labels [1, 0, ...] (1 foreground)"})
    boxes: Any = field(default=None, metadata={"help": "prompt task: boxes [[x1, y1, x2, y2], ...] in image pixels"})
    multimask_output: bool = field(default=False, metadata={"help": "prompt task: three candidate masks per prompt"})
    angle_cls: bool | None = field(default=None, metadata={
        "help": "ocr task: read text lines an angle classifier calls upside down turned by 180 degrees "
                "(default: where the model has one)"})

    @classmethod
    def names(cls) -> tuple[str, ...]:
        """The keyword names, in signature order (read once per class: every predict call asks)."""
        got = cls.__dict__.get("_names")
        if got is None:
            got = tuple(f.name for f in fields(cls))
            cls._names = got
        return got

    @classmethod
    def pick(cls, values: Mapping[str, Any]) -> dict[str, Any]:
        """The entries of ``values`` (e.g. a verb's ``locals()``) that are predict options."""
        return {name: values[name] for name in cls.names() if name in values}

    @classmethod
    def build(cls, *, model: Family, **kw: Any) -> PredictOptions:
        """``PredictOptions(**kw).resolve(model)``; an unknown keyword raises :class:`ConfigError`."""
        check_keys(kw, cls.names(), what="predict")
        return cls(**kw).resolve(model)

    def resolve(self, model: Family) -> PredictOptions:
        """Validate against ``model`` and return the options the pipeline runs with (class doc).

        Raises:
            ConfigError: a value out of range or of the wrong type (the key is named).
        """
        from ..graphs.runner import check_policy
        from ..models._base.family import select_device

        conf, iou, imgsz, classes = self.conf, self.iou, self.imgsz, self.classes
        for key, v in (("conf", conf), ("iou", iou)):
            if isinstance(v, bool) or not isinstance(v, (int, float)) or not 0.0 <= float(v) <= 1.0:
                raise ConfigError(f"{key} must be a number in [0, 1], got {v!r}")
        for key, v in (("max_det", self.max_det), ("batch", self.batch)):
            if isinstance(v, bool) or not isinstance(v, int) or v < 1:
                raise ConfigError(f"{key} must be a positive int, got {v!r}")
        if classes is not None:
            if isinstance(classes, int):
                classes = [classes]
            if not all(isinstance(c, int) and 0 <= c < model.nc for c in classes):
                raise ConfigError(f"classes must be class ids in [0, {model.nc - 1}], got {classes!r}")
        for key in ("half", "fuse", "rect", "save_txt", "save_conf", "save_crop", "show", "verbose", "multimask_output"):
            if not isinstance(getattr(self, key), bool):
                raise ConfigError(f"{key} must be True or False, got {getattr(self, key)!r}")
        vid_stride, line_width = self.vid_stride, self.line_width
        if isinstance(vid_stride, bool) or not isinstance(vid_stride, int) or vid_stride < 1:
            raise ConfigError(f"vid_stride must be a positive int (1 reads every video frame), got {vid_stride!r}")
        if line_width is not None and (isinstance(line_width, bool) or not isinstance(line_width, int)
                                       or line_width < 1):
            raise ConfigError(f"line_width must be a positive int (pixels) or None (scaled to the image), "
                              f"got {line_width!r}")
        if self.angle_cls is not None and not isinstance(self.angle_cls, bool):
            raise ConfigError(f"angle_cls must be True, False or None (where the model has a classifier), "
                              f"got {self.angle_cls!r}")
        check_policy(self.cuda_graph)
        dev = select_device(self.device) if self.device is not None else None
        hw = check_imgsz(imgsz if imgsz is not None else model.imgsz, stride=model.stride)
        if imgsz is not None and tuple(hw) != ((imgsz, imgsz) if isinstance(imgsz, int) else tuple(imgsz)):
            logger.warning("imgsz=%s is not a multiple of the stride %d: predicting at imgsz=%s",
                           imgsz, model.stride, list(hw))  # the same rounding (and notice) as train
        return replace(
            self, conf=float(conf), iou=float(iou), imgsz=hw,
            classes=list(classes) if classes is not None else None, device=dev,
            save=bool(self.save), save_dir=Path(self.save_dir) if self.save_dir else None,
            agnostic_nms=bool(self.agnostic_nms), bgr=bool(self.bgr),
        )


class CallClock:
    """Per-batch timing whose parts add up to the whole call, without extra host syncs.

    On CUDA the preprocessing and network parts are GPU time between events recorded around
    them (read after the batch's one device-to-host copy, so no sync is added); postprocessing is
    the rest of the time until detections are on the host; ``results`` is building the Results.

    ``host_clock``: every part is host wall-clock time instead, also on CUDA. The graph path uses
    it: there the network call returns only when its outputs are on the host (one copy, one
    synchronisation), so ``inference`` is the time from the launch until they arrived (the GPU's
    normalisation, network and decode, and the copy) and ``preprocess`` the host work before it,
    without three timed events per call (each record costs about 13 us on the GPU host, measured
    by ``benchmarks/predict_phases.py``). A call that runs eager instead (the first sighting under
    ``cuda_graph="auto"``) counts its wait for the GPU in ``postprocess``, where the copy happens.
    """

    _spare: ClassVar[dict[torch.device, list[list[Any]]]] = {}  # event triples of finished calls, per device

    def __init__(self, device: torch.device, *, host_clock: bool = False) -> None:
        self.cuda = device.type == "cuda" and not host_clock
        self.device = device
        if self.cuda:  # looked up once per call: each lookup costs tens of microseconds on a slow host
            self.stream = torch.cuda.current_stream(device)
            spare = self._spare.get(device)
            try:  # list.pop is atomic: two calls in two threads never share a triple
                self.events = spare.pop() if spare else None
            except IndexError:
                self.events = None
            if self.events is None:
                self.events = [torch.cuda.Event(enable_timing=True) for _ in range(3)]

    def close(self) -> None:
        """The call is over: its events go back for the next call on this device (a few kept)."""
        if self.cuda and self.events is not None:
            spare = self._spare.setdefault(self.device, [])
            if len(spare) < 4:
                spare.append(self.events)
            self.events = None

    def start(self) -> None:
        self.t0 = time.perf_counter()
        self.marks: list[Any] = []
        if self.cuda:  # the events of the previous batch were read (speed) before this batch starts
            self.events[0].record(self.stream)
            self.marks.append(self.events[0])

    def mark(self) -> None:
        if self.cuda:
            ev = self.events[len(self.marks)]
            ev.record(self.stream)
            self.marks.append(ev)
        else:
            self.marks.append(time.perf_counter())

    def on_host(self) -> None:
        """Detections are on the host (the GPU work of the batch is done)."""
        self.t3 = time.perf_counter()

    def speed(self, n: int) -> dict[str, float]:
        t4 = time.perf_counter()
        if self.cuda:
            e0, e1, e2 = self.marks
            e2.synchronize()
            pre, inf = e0.elapsed_time(e1), e1.elapsed_time(e2)
        else:
            t1, t2 = self.marks
            pre, inf = (t1 - self.t0) * 1e3, (t2 - t1) * 1e3
        post = max(0.0, (self.t3 - self.t0) * 1e3 - pre - inf)
        res = (t4 - self.t3) * 1e3
        return {"preprocess": pre / n, "inference": inf / n, "postprocess": post / n, "results": res / n}


def _prepared(model: Any, opts: PredictOptions) -> tuple[Any, torch.dtype | None, torch.dtype, bool]:
    """(the model predict runs, the autocast dtype it still needs, the dtype and channels-last
    layout its input is built in). Autocast only where the weights could not be cast (a family with
    ``HALF_CAST = False``, a quantized model); a backend without preparation (ONNX Runtime) takes
    fp32 NCHW input and no autocast."""
    from ..models._base.inference import channels_last, half_dtype, input_dtype

    prepare = getattr(model, "prepared", None)
    if prepare is None:
        return model, None, torch.float32, False
    twin = prepare(half=opts.half, fuse=opts.fuse)
    dtype = input_dtype(twin)
    amp = half_dtype(model.device) if opts.half and dtype == torch.float32 else None
    return twin, amp, dtype, channels_last(twin)


def predict(model: Family, source: Any, opts: PredictOptions) -> Iterator[Results]:
    """Yield one :class:`Results` per image / frame (``opts.verbose``: one log line each, shown on
    stderr when the application has not configured logging)."""
    if not opts.verbose:  # the common case: no logging context to enter
        yield from _predict(model, source, opts)
        return
    from .val_logging import library_logging

    with library_logging(True):
        yield from _predict(model, source, opts)


def _predict(model: Family, source: Any, opts: PredictOptions) -> Iterator[Results]:
    from ..models._base.inference import cudnn_benchmark
    from ..tasks import task_of
    from .sources import load_source

    if opts.device is not None:
        model.to(opts.device)  # drops graphs if the device changes (G-8)
    device = model.device
    if model.net.training:  # eval() walks every module (milliseconds for a large net): only when needed
        model.net.eval()
    batches = load_source(source, batch=opts.batch, bgr=opts.bgr,
                          vid_stride=opts.vid_stride)  # validates before any side effect
    twin, amp, dtype, cl = _prepared(model, opts)
    task = task_of(model)
    decoded = task.predict_decoded(twin, opts)
    saver = _Saver(model, opts, source)
    # on the graph path the last preprocessing step (BGR swap, divide by 255, cast, layout) runs as
    # the first kernels of the graph (tasks.detect.preprocess.Normalize), and a replay's candidates
    # are copied from graph memory straight to the host
    in_graph = opts.cuda_graph is not False and device.type == "cuda" and amp is None and getattr(
        twin, "GRAPH_PROLOGUE", False)
    clock = CallClock(device, host_clock=in_graph and decoded)

    def forward(x: Tensor, decoded: bool, prologue: Any = None) -> Any:
        with cudnn_benchmark(device):
            if decoded:
                return twin.forward(x, cuda_graph=opts.cuda_graph, amp_dtype=amp, decoded=True, prologue=prologue,
                                    host=True)
            if prologue is not None:
                return twin.forward(x, cuda_graph=opts.cuda_graph, amp_dtype=amp, prologue=prologue)
            return twin.forward(x, cuda_graph=opts.cuda_graph, amp_dtype=amp)

    for items in batches:
        clock.start()
        split = task.preprocess_pixels(items, imgsz=opts.imgsz, device=device, dtype=dtype, channels_last=cl,
                                       rect=opts.rect, stride=model.stride) if in_graph else None
        if split is None:
            x, params = task.preprocess(items, imgsz=opts.imgsz, device=device, dtype=dtype, channels_last=cl,
                                        rect=opts.rect, stride=model.stride)
            prologue = None
        else:
            x, params, prologue = split
        clock.mark()
        with task.network_scope(twin, opts, params):
            raw = forward(x, decoded, prologue)
        clock.mark()
        outs = task.outputs(twin, raw, items=items, params=params, opts=opts, decoded=decoded,
                            rerun=lambda x=x, prologue=prologue: forward(x, False, prologue))
        clock.on_host()
        yield from _emit(model, items, clock, saver, **{task.results_field: outs})
    clock.close()
    _report_skipped(batches)


def _emit(model: Any, items: list[Any], clock: CallClock, saver: _Saver, **field: list[Tensor]) -> Iterator[Results]:
    """Build one batch's Results (``boxes=`` or ``probs=``; a task whose per-image value is a dict
    fills several fields, e.g. ``boxes`` and ``masks``), stamp the batch's speed, save, yield."""
    ((name, values),) = field.items()
    out = [Results(orig_img=it.orig, path=it.path, names=model.names, frame=it.frame,
                   **(v if isinstance(v, dict) else {name: v}))
           for it, v in zip(items, values, strict=True)]
    speed = clock.speed(len(items))
    for r in out:
        r.speed = speed
        saver(r)
        if saver.verbose:
            h, w = r.orig_img.shape[:2]
            where = r.path or "image"
            if r.frame is not None:
                where = f"{where} frame {r.frame}"
            logger.info("%s: %dx%d %s, %.1fms", where, w, h, r.verbose(), sum(speed.values()))
        yield r


class _Saver:
    """Writes what ``save`` / ``save_txt`` / ``save_crop`` / ``show`` ask for
    (:class:`~libreyolo.engine.saving.ResultWriter`): the run folder is made on first use, output
    names never overwrite an input (a ``save_dir`` that is the source folder is refused before any
    image is written), video frames become one video file per source video, finished when the
    run ends (the saver is released)."""

    def __init__(self, model: Any, opts: PredictOptions, source: Any) -> None:
        from .saving import ResultWriter

        self.writer = ResultWriter.from_options(opts, task=model.task, source=source)
        self.verbose = opts.verbose

    def __call__(self, r: Results) -> None:
        self.writer(r)


def _report_skipped(batches: Any) -> None:
    if getattr(batches, "skipped", None):
        logger.warning("%d of %d files skipped (unreadable)", batches.n_skipped, batches.n_read + batches.n_skipped)
