"""The model a user holds: what ``LibreYOLO(...)`` returns.

A :class:`Model` owns a :class:`~libreyolo.models._base.family.Family` (the architecture: its
network, postprocess, criterion, capabilities) and a backend that runs the network
(:class:`~libreyolo.backends.torch.TorchBackend`: eager or CUDA-graph replay, with its prepared
inference twin). It offers the verbs: ``predict``/``track``, ``train``, ``val``, ``export``,
``quantize``, ``capture_graph``, ``save``. This is the one module that brings the engine,
training, export, quantization and checkpoint I/O together; nothing below it imports it.

Attributes of the architecture (``net``, ``names``, ``nc``, ``size``, ``FAMILY``, ``imgsz``...) read
and write through to the family, so ``model.net`` and ``model.names`` are what they always were.
"""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import TYPE_CHECKING, Any

import torch
from torch import Tensor

from .backends.torch import TorchBackend
from .errors import ConfigError, keyword_checked
from .models._base.family import CudaGraphPolicy, Family

if TYPE_CHECKING:
    from .engine.results import Results

__all__ = ["LibreYOLO", "Model"]

_OWN = frozenset({"family", "backend"})


class Model:
    """A family plus the backend that runs it, with the user verbs.

    The methods' examples assume ``import torch``, ``from pathlib import Path`` and
    ``from libreyolo import LibreYOLO, SAMPLE_IMAGE``; each runs on a CPU in seconds.

    Example:
        >>> from libreyolo.model import Model
        >>> from libreyolo.models.yolo9.family import YOLO9
        >>> m = Model(YOLO9(size="t", nc=3))
        >>> m.FAMILY, m.nc, m.family.nc
        ('yolo9', 3, 3)
    """

    def __init__(self, family: Family, backend: Any = None) -> None:
        if not isinstance(family, Family):
            raise ConfigError(f"Model() takes a Family, got {type(family).__name__}")
        if backend is not None and getattr(backend, "family", None) is not family:
            raise ConfigError("Model(family, backend): the backend runs another family")
        object.__setattr__(self, "family", family)
        object.__setattr__(self, "backend", backend if backend is not None else TorchBackend(family))

    def __getattr__(self, name: str) -> Any:
        # what runs the network (net, postprocess, device of an export) comes from the backend,
        # which passes architecture attributes (names, nc, FAMILY...) on to the family
        if name.startswith("__") or name in _OWN:
            raise AttributeError(name)
        return getattr(self.backend, name)

    def __setattr__(self, name: str, value: Any) -> None:  # ... and write through to it
        if name in _OWN:
            object.__setattr__(self, name, value)
        else:
            setattr(self.family, name, value)

    def __dir__(self) -> list[str]:
        return sorted(set(super().__dir__()) | set(dir(self.family)))

    # ------------------------------------------------------------------ device / state
    @property
    def device(self) -> torch.device:
        return self.backend.device

    def to(self, device: str | torch.device) -> Model:
        """Move the model. Moving relocates parameters, so captured graphs are dropped (G-8).

        Example:
            >>> LibreYOLO("LibreYOLO9t.pt").to("cpu").device
            device(type='cpu')
        """
        self.backend.to(device)
        return self

    def fuse(self) -> Model:
        """Fold BatchNorm into convolutions and merge re-parameterisable branches for inference;
        parameters are replaced, so captured graphs are dropped. A fused model cannot train.

        Example:
            >>> LibreYOLO("LibreYOLO9t.pt").fuse().fused
            True
        """
        self.backend.fuse()
        return self

    def prepared(self, *, half: bool = False, fuse: bool = True) -> TorchBackend:
        """The inference twin ``predict()`` runs, as a backend: fused (unless ``fuse=False``),
        cast once to half precision when ``half`` (float16 on CUDA, bfloat16 on CPU),
        channels-last where the family measured it wins. Built on first use and rebuilt when the
        weights change; this model's own network, training and checkpoints are untouched (see
        :class:`~libreyolo.backends.torch.TorchBackend`).

        Example:
            >>> twin = LibreYOLO("LibreYOLO9t.pt").prepared(half=False)
            >>> twin.fused, next(twin.net.parameters()).dtype
            (True, torch.float32)
        """
        return self.backend.prepared(half=half, fuse=fuse)

    def invalidate_graphs(self, reason: str) -> None:
        """Drop captured graphs (parameters moved or were replaced), the prepared twin's too."""
        self.backend.invalidate(reason)

    def load_weights(self, state_dict: dict[str, Tensor], *, strict: bool = True) -> None:
        """Copy weights into the existing parameters (addresses kept, graphs stay valid).

        Example:
            >>> trained, fresh = LibreYOLO("LibreYOLO9t.pt"), LibreYOLO("LibreYOLO9t.pt", pretrained=False, nc=6)
            >>> fresh.load_weights(trained.net.state_dict())
            >>> torch.equal(*(m(SAMPLE_IMAGE, imgsz=320)[0].boxes.data for m in (fresh, trained)))
            True
        """
        from .io.checkpoint import load_state_into

        load_state_into(self.family, state_dict, strict=strict)
        self.backend.drop_prepared()

    def save(self, path: str | Path, **extra: Any) -> Path:
        """Write a checkpoint (weights + metadata), atomically; ``extra`` keys are stored with it.

        Example:
            >>> import tempfile; path = LibreYOLO("LibreYOLO9t.pt").save(Path(tempfile.mkdtemp()) / "my.pt")
            >>> LibreYOLO(path).names[0]
            'circle'
        """
        from .io.checkpoint import save_model

        self._refuse("save")
        return save_model(self.family, Path(path), extra=extra)

    def info(self) -> dict[str, Any]:
        """Family, size, task, class count, parameter count, default ``imgsz``, fused or not.

        Example:
            >>> {k: v for k, v in LibreYOLO("LibreYOLO9t.pt").info().items() if k != "params"}
            {'family': 'yolo9', 'size': 't', 'task': 'detect', 'nc': 6, 'imgsz': 320, 'fused': False}
        """
        return self.family.info()

    def __repr__(self) -> str:
        return repr(self.backend) if self.backend.exported else repr(self.family)

    def _refuse(self, verb: str) -> None:
        refuse = getattr(self.backend, "refuse", None)
        if refuse is not None:
            refuse(verb)

    # ------------------------------------------------------------------ network step
    def forward(self, x: Tensor, *, cuda_graph: CudaGraphPolicy = False, amp_dtype: torch.dtype | None = None,
                decoded: bool = False) -> Any:
        """Run the network on a preprocessed batch (Tensor[B, 3, H, W] float in [0, 1]).

        With ``cuda_graph`` True/"auto" the capturable stages replay from CUDA graphs. With
        ``decoded`` the family's :meth:`~libreyolo.models._base.family.Family.decode` follows
        the network (in the same graph).
        """
        return self.backend.forward(x, cuda_graph=cuda_graph, amp_dtype=amp_dtype, decoded=decoded)

    def eager_forward(self, x: Tensor, *, amp_dtype: torch.dtype | None = None, decoded: bool = False) -> Any:
        """The eager contract every replay must equal bit for bit."""
        return self.family.eager_forward(x, amp_dtype=amp_dtype, decoded=decoded)

    # ------------------------------------------------------------------ CUDA graphs (G-3)
    @property
    def graphs(self) -> Any:
        """This model's prediction graphs (:class:`~libreyolo.graphs.runner.PredictGraphs`)."""
        return self.backend.graphs

    def capture_graph(
        self, imgsz: int | tuple[int, int] | None = None, batch: int = 1, dtype: torch.dtype | None = None,
        *, half: bool | None = None, fuse: bool = True,
    ) -> dict[str, Any]:
        """Capture the prediction graph for one input shape ahead of the first request.

        The graph is the one ``predict(cuda_graph=...)`` replays: the prepared model (fused; cast
        to half when ``half=True`` or ``dtype`` is a half dtype) with the family's decode inside.
        ``imgsz`` is the *network input* size: ``predict`` letterboxes a single image to the
        smallest stride-multiple rectangle (a 640x480 photo runs at (480, 640)), so capture that.

        Example:
            >>> model = LibreYOLO("LibreYOLO9t.pt").to("cuda")  # CUDA only  # doctest: +SKIP
            >>> info = model.capture_graph(imgsz=(480, 640), half=True)  # model(SAMPLE_IMAGE, cuda_graph=True, half=True) replays it  # doctest: +SKIP
        """
        self._refuse("capture_graph")
        return self.backend.capture(imgsz=imgsz, batch=batch, dtype=dtype, half=half, fuse=fuse)

    def graph_info(self) -> dict[str, Any]:
        """Captured graphs (shape, dtype, device, replays, capture ms) and eager-fallback reasons;
        after ``predict`` these are the prepared model's graphs (see :meth:`prepared`).

        Example:
            >>> LibreYOLO("LibreYOLO9t.pt").graph_info()["graphs"]  # none captured yet
            []
        """
        return self.backend.graph_info()

    def release_graphs(self) -> None:
        """Free every captured graph and its memory pool (the prepared model's too).

        Example:
            >>> model = LibreYOLO("LibreYOLO9t.pt"); model.release_graphs()
            >>> model.graph_info()["graphs"]
            []
        """
        self.backend.release()

    # ------------------------------------------------------------------ user API
    @keyword_checked("predict")
    def predict(
        self,
        source: Any = None,
        *,
        conf: float = 0.25,
        iou: float = 0.7,
        imgsz: int | tuple[int, int] | None = None,
        classes: list[int] | None = None,
        max_det: int = 300,
        device: str | torch.device | None = None,
        batch: int = 1,
        save: bool = False,
        save_dir: str | Path | None = None,
        stream: bool = False,
        cuda_graph: CudaGraphPolicy = False,
        half: bool = False,
        agnostic_nms: bool = False,
        bgr: bool = True,
        fuse: bool = True,
        rect: bool = True,
        vid_stride: int = 1,
        save_txt: bool = False,
        save_conf: bool = False,
        save_crop: bool = False,
        line_width: int | None = None,
        show: bool = False,
        verbose: bool = False,
        points: Any = None,
        labels: Any = None,
        boxes: Any = None,
        multimask_output: bool = False,
        angle_cls: bool | None = None,
    ) -> list[Results] | Iterator[Results]:
        """Detect objects in ``source`` (path, folder, glob, ``.txt`` list, PIL, numpy, tensor,
        video, webcam index, stream URL: :mod:`libreyolo.engine.sources`).

        Runs the prepared model (:meth:`prepared`): fused unless ``fuse=False``; ``half=True``
        casts its weights once to float16 (CUDA) / bfloat16 (CPU). ``rect=True`` letterboxes a
        single image (or a batch of same-sized images) to the smallest stride-multiple rectangle;
        ``rect=False`` always to the square ``imgsz``. ``Results.speed`` holds milliseconds per
        image for ``preprocess``, ``inference``, ``postprocess`` and ``results``; they add up to
        the call.

        Outputs (:class:`~libreyolo.engine.saving.ResultWriter`): ``save`` writes annotated
        images to ``save_dir`` (default ``runs/<task>/predict<N>``), a video source as one video
        file (``<stem>.mp4``, ``.avi`` where mp4 cannot be written); ``save_txt`` YOLO label lines
        under ``labels/`` (with the confidence when ``save_conf``); ``save_crop`` each box's crop
        under ``crops/<class>/``; ``line_width`` the outline width drawn; ``show`` a window per
        image where a display exists. ``vid_stride`` reads every n-th video / stream frame. Use
        ``stream=True`` for webcams and long videos (results one at a time, constant memory).
        ``verbose=True`` logs one line per image (objects found, milliseconds).
        A promptable model (task ``prompt``: SAM, MobileSAM) takes ``points`` ([[x, y], ...] in
        image pixels) with ``labels`` (1 foreground, 0 background), ``boxes`` ([[x1, y1, x2, y2],
        ...]) and ``multimask_output`` (three candidate masks per prompt): :mod:`libreyolo.tasks.prompt`.
        An OCR model (task ``ocr``) takes ``angle_cls``: read the text lines its angle classifier calls
        upside down turned by 180 degrees (None: where the model has classifier weights): :mod:`libreyolo.tasks.ocr`.

        Example:
            >>> from libreyolo import LibreYOLO, SAMPLE_IMAGE
            >>> r = LibreYOLO("LibreYOLO9t.pt").predict(SAMPLE_IMAGE, conf=0.25)[0]  # one image: one Results
            >>> r.boxes.xyxy.shape[-1], r.orig_shape, sorted(r.speed)
            (4, (480, 640), ['inference', 'postprocess', 'preprocess', 'results'])
        """
        opts = self._options(locals())  # first: the keywords above, and nothing else yet
        from .engine.predictor import predict

        gen = predict(self, source, opts)
        return gen if stream else list(gen)

    __call__ = predict

    def _options(self, values: dict[str, Any]) -> Any:
        """The :class:`~libreyolo.engine.predictor.PredictOptions` of a ``predict`` / ``track`` call
        from its ``locals()``: the keywords that are its fields, so the two signatures are the only
        lists of them (held equal to the fields by tests/unit/engine/test_predict_options.py)."""
        from .engine.predictor import PredictOptions

        kw = PredictOptions.pick(values)
        adjust = getattr(self.backend, "predict_options", None)
        if adjust is not None:
            kw = adjust(kw)
        key = _options_key(self, kw)
        cache: dict[Any, Any] = self.__dict__.setdefault("_resolved_options", {})
        if key is not None and key in cache:  # the same keywords again: validated already
            return cache[key]
        opts = PredictOptions.build(model=self, **kw)
        if key is not None:
            if len(cache) >= _OPTIONS_CACHE_SIZE:
                cache.pop(next(iter(cache)))
            cache[key] = opts
        return opts

    @keyword_checked("track")
    def track(
        self,
        source: Any = None,
        *,
        persist: bool = False,
        tracker: str | Path | Any = "bytetrack",
        conf: float = 0.1,
        iou: float = 0.7,
        imgsz: int | tuple[int, int] | None = None,
        classes: list[int] | None = None,
        max_det: int = 300,
        device: str | torch.device | None = None,
        batch: int = 1,
        save: bool = False,
        save_dir: str | Path | None = None,
        stream: bool = False,
        cuda_graph: CudaGraphPolicy = False,
        half: bool = False,
        agnostic_nms: bool = False,
        bgr: bool = True,
        fuse: bool = True,
        rect: bool = True,
        vid_stride: int = 1,
        save_txt: bool = False,
        save_conf: bool = False,
        save_crop: bool = False,
        line_width: int | None = None,
        show: bool = False,
        verbose: bool = False,
        points: Any = None,
        labels: Any = None,
        boxes: Any = None,
        multimask_output: bool = False,
        angle_cls: bool | None = None,
    ) -> list[Results] | Iterator[Results]:
        """Detect and track objects over the frames of ``source`` (a video, webcam, stream, or
        frames passed one call at a time with ``persist=True``); :mod:`libreyolo.trackers`.

        Each result keeps the boxes on a confirmed track, with ``boxes.id`` (int64 track ids,
        ``boxes.is_track`` True); ``plot()`` draws the ids. ``tracker`` is ``"bytetrack"``, a
        YAML file of :class:`~libreyolo.trackers.ByteTrackConfig` keys, or such a config;
        ``persist=True`` keeps the tracks from the previous call. ``conf`` defaults to 0.1 so
        that ByteTrack's low-score association sees the weak detections. The other keywords are
        those of :meth:`predict`.

        Example:
            >>> model = LibreYOLO("LibreYOLO9t.pt")
            >>> for frame in (SAMPLE_IMAGE, SAMPLE_IMAGE):  # a video: model.track("clip.mp4", stream=True)
            ...     r = model.track(frame, persist=True)[0]
            >>> r.boxes.is_track, len(r.boxes.id) == len(r)
            (True, True)
        """
        opts = self._options(locals())  # first: the keywords above, and nothing else yet
        from .trackers.track import track

        gen = track(self, source, opts, tracker=tracker, persist=persist)
        return gen if stream else list(gen)

    def train(self, **overrides: Any) -> dict[str, Any]:
        """Train on a YOLO-format dataset; keys as in :class:`libreyolo.training.config.TrainConfig`.

        Example:
            >>> import tempfile; tmp = Path(tempfile.mkdtemp())
            >>> from libreyolo.data.shapes import ensure_shapes_dataset
            >>> data = ensure_shapes_dataset(tmp, n_train=4, n_val=2, imgsz=64)  # a tiny data="shapes"
            >>> out = LibreYOLO("LibreYOLO9t.pt").train(data=str(data), epochs=1, imgsz=64, batch=2, workers=0, project=str(tmp))
            >>> out["epochs"], Path(out["best"]).is_file(), "mAP50-95" in out
            (1, True, True)
        """
        from .training.trainer import train

        self._refuse("train")
        self.backend.drop_prepared()  # the inference twin (a copy of the network and its graphs) is rebuilt after
        net, device = self.family.net, self.family.device
        try:
            return train(self.family, overrides)
        finally:  # the trainer works on the architecture; graphs of a replaced or moved network go
            if self.family.net is not net:
                self.backend.invalidate("head rebuilt for a new class count")
            elif self.family.device != device:
                self.backend.invalidate(f"model moved from {device} to {self.family.device} for training")

    def val(self, **overrides: Any) -> dict[str, float]:
        """Validate on a dataset: a :class:`~libreyolo.tasks.detect.results.DetMetrics` (COCO mAP, P, R, per class).

        Example:
            >>> import tempfile; from libreyolo.data.shapes import ensure_shapes_dataset
            >>> data = ensure_shapes_dataset(Path(tempfile.mkdtemp()), n_train=4, n_val=2, imgsz=64)
            >>> m = LibreYOLO("LibreYOLO9t.pt").val(data=str(data), imgsz=64, batch=2)
            >>> m["images"], 0.0 <= m["mAP50-95"] <= 1.0, set(m.per_class) <= set(m.names)
            (2.0, True, True)
        """
        from .engine.validator import validate

        adjust = getattr(self.backend, "val_overrides", None)
        return validate(self, adjust(overrides) if adjust is not None else overrides)

    def export(self, **overrides: Any) -> Path:
        """Export the network (``format`` onnx, torchscript, openvino, ncnn, executorch; keys of :class:`~libreyolo.export.config.ExportConfig`);
        the exported graph holds portable math. ``LibreYOLO(path)`` loads it back as a :class:`Model`.

        Example:
            >>> import tempfile; out = Path(tempfile.mkdtemp()) / "LibreYOLO9t.torchscript"
            >>> path = LibreYOLO("LibreYOLO9t.pt").export(format="torchscript", imgsz=64, file=str(out))
            >>> LibreYOLO(path)(SAMPLE_IMAGE, imgsz=64)[0].boxes.data.shape[1]
            6
        """
        from .export import export

        self._refuse("export")
        return export(self, overrides)

    # quantization (libreyolo/kernels/quant) -------------------------------------
    def quantize(self, **overrides: Any) -> Model:
        """Quantize (recipes fp8, int8; keys of :class:`~libreyolo.kernels.quant.model.QuantConfig`).

        Example:
            >>> LibreYOLO("LibreYOLO9t.pt").quantize(recipe="int8", calibrate=torch.rand(1, 3, 64, 64)).quant_info()["activations"]
            True
        """
        from .kernels.quant.model import quantize_model

        self._refuse("quantize")
        self.invalidate_graphs("model quantized")
        quantize_model(self, overrides)
        return self

    def dequantize(self) -> Model:
        """Put the float layers back (after :meth:`quantize`); drops captured graphs.

        Example:
            >>> LibreYOLO("LibreYOLO9t.pt").quantize(recipe="fp8").dequantize().quant_info()["quantized"]
            False
        """
        from .kernels.quant.model import dequantize_model

        self.invalidate_graphs("model dequantized")
        dequantize_model(self)
        return self

    def quant_info(self) -> dict[str, Any]:
        """Whether the model is quantized, its recipe and modules, and the kernels that run it.

        Example:
            >>> LibreYOLO("LibreYOLO9t.pt").quantize(recipe="int8").quant_info()["format"]
            'int8'
        """
        from .kernels.quant.model import quant_info

        return quant_info(self)


def LibreYOLO(  # noqa: N802 - reads like a class at call sites, as users expect
    model: str | Path = "LibreYOLO9t.pt",
    *,
    pretrained: bool = True,
    nc: int | None = None,
    names: dict[int, str] | list[str] | None = None,
    device: str | None = None,
) -> Model:
    """Build a model from a weights name or file (SPEC U-1).

    Order: an existing local path, ``LIBREYOLO_WEIGHTS_DIR``, weights bundled with the package,
    then the Hugging Face Hub cache / download. A checkpoint of another library (an Ultralytics
    ``.pt``, timm weights with their ``config.json``, or a folder holding both) is recognised and
    converted on load with one log line (:mod:`libreyolo.convert`, docs/weights.md); so is a Hub
    repository of such weights named ``"hf-hub:<owner>/<repo>"`` (Hub cache first, then download). ``pretrained=False`` builds an untrained model of
    the family and size the name describes (``nc``/``names`` set its classes); its initial weights
    are drawn from a fixed seed (:data:`libreyolo.convert.build.INIT_SEED`) without touching the global random state, so the
    same call gives the same network in every process and ``train(seed=...)`` from it repeats.

    Example:
        >>> from libreyolo import LibreYOLO
        >>> LibreYOLO("LibreYOLO9t.pt").names  # the bundled weights, trained on "shapes"
        {0: 'circle', 1: 'square', 2: 'triangle', 3: 'star', 4: 'hexagon', 5: 'cross'}
        >>> model = LibreYOLO("LibreYOLO9t.pt", pretrained=False, nc=3)
        >>> model.FAMILY, model.size, model.nc
        ('yolo9', 't', 3)
    """
    from .convert.build import build_family
    from .export.registry import format_of_path

    if not isinstance(model, (str, Path)):
        raise ConfigError(f"LibreYOLO() takes a weights name or path, got {type(model).__name__}")
    name = str(model)
    exported = format_of_path(name)  # .onnx, .torchscript, an OpenVINO folder / .xml (export registry)
    if exported is not None:
        backend = exported.load_backend()(name, device=device)
        return Model(backend.family, backend)
    fam = build_family(name, pretrained=pretrained, nc=nc, names=names)
    m = Model(fam)
    if device is not None:
        m.to(device)
    return m


_OPTIONS_CACHE_SIZE = 16


def _frozen(v: Any) -> Any:
    """``v`` with lists / tuples made tuples (recursively), so keyword values can key a dict."""
    if isinstance(v, (list, tuple)):
        return tuple(_frozen(x) for x in v)
    return v


def _options_key(model: Any, kw: dict[str, Any]) -> Any:
    """What a resolved :class:`~libreyolo.engine.predictor.PredictOptions` depends on: the
    backend, the model's class count, input size and stride, and the keyword values; None when a
    value cannot key a dict (a prompt given as an array), so those calls resolve every time.
    Repeated ``predict`` calls with the same keywords skip the validation (tens of microseconds of
    a batch-1 call whose network replays in two milliseconds)."""
    head = (id(model.backend), model.nc, _frozen(model.imgsz), model.stride, tuple(kw))
    key = (*head, tuple(kw.values()))
    try:
        hash(key)
    except TypeError:  # a list value (classes=[0, 2], imgsz=[h, w]): as a tuple
        key = (*head, tuple(_frozen(v) for v in kw.values()))
        try:
            hash(key)
        except TypeError:
            return None
    return key
