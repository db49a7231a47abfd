"""The Family base class: capability ClassVars plus the predict/train/val glue.

A family subclass supplies the network (:meth:`Family.build_net`), turns raw head outputs into
detections (:meth:`Family.postprocess`) and, for training, a criterion (:meth:`Family.build_criterion`).
Everything else (sources, preprocessing, CUDA graphs, Results, trainer, validator, export) is
shared and asks the class for capabilities instead of naming families (DESIGN convention 1).
"""

from __future__ import annotations

import logging
from collections.abc import Iterator
from pathlib import Path
from typing import TYPE_CHECKING, Any, ClassVar, Literal

import torch
from torch import Tensor, nn

from ...device import autocast, first_parameter, select_device  # noqa: F401 - select_device re-exported
from ...errors import ConfigError, keyword_checked
from ...graphs.seam import Stage
from .names import normalise_names

if TYPE_CHECKING:
    from ...engine.results import Results

logger = logging.getLogger(__name__)

CudaGraphPolicy = Literal[False, True, "auto"]


class Family:
    """One model architecture with its sizes and tasks.

    Capability ClassVars are conservative by default; a ``True`` must be backed by a row of a
    committed parity matrix (``docs/cuda-graph-parity.json``, ``docs/cuda-graph-training-parity.json``),
    which a CPU test checks.
    """

    FAMILY: ClassVar[str] = ""
    NAME_TOKEN: ClassVar[str] = ""  # weights-name token: Libre<TOKEN><size>.pt
    TASKS: ClassVar[tuple[str, ...]] = ("detect",)
    # what postprocess returns per image: "boxes" (Tensor[n, 6] detections) or "probs" (Tensor[nc]
    # class probabilities); shared code (predictor, trainer, validator) branches on this capability
    OUTPUT_KIND: ClassVar[str] = "boxes"
    SIZES: ClassVar[tuple[str, ...]] = ()
    DEFAULT_IMGSZ: ClassVar[int] = 640
    STRIDE: ClassVar[int] = 32
    LOSS_NAMES: ClassVar[tuple[str, ...]] = ()
    OUTPUT_NAMES: ClassVar[tuple[str, ...]] = ()  # names of the raw outputs in exported graphs
    EXPORT_DYNAMIC_AXES: ClassVar[tuple[str, ...]] = ()  # subset of ("batch", "height", "width")

    # The family's training recipe as TrainConfig keys, applied under the user's own keys.
    TRAIN_DEFAULTS: ClassVar[dict[str, object]] = {}

    SUPPORTS_CUDA_GRAPH: ClassVar[bool] = False
    CUDA_GRAPH_REASON: ClassVar[str] = "no bitwise parity run recorded for this family"
    SUPPORTS_TRAIN_CUDA_GRAPH: ClassVar[bool] = False
    TRAIN_CUDA_GRAPH_REASON: ClassVar[str] = "no training-capture parity run recorded for this family"

    # Inference preparation (models/_base/inference.py): run the prepared twin in channels-last
    # memory format on CUDA (set per family from benchmarks/bench_layout.py).
    INFER_CHANNELS_LAST: ClassVar[bool] = False
    # half=True casts the prepared twin's weights once (float16 on CUDA, bfloat16 on CPU). A family
    # whose math is not safe in a low-precision cast keeps fp32 weights under autocast instead.
    HALF_CAST: ClassVar[bool] = True
    HALF_CAST_REASON: ClassVar[str] = ""
    # Captured decode: a family that implements decode(raw) -> Tensor[B, DECODE_TOPK, 6] (the top
    # candidates by score, a pure function of the head output) gets it inside the prediction
    # graph; only thresholding and NMS on those candidates stay eager. 0: no captured decode.
    DECODE_TOPK: ClassVar[int] = 0
    # Whether the eager selection after decode runs NMS (dense heads) or only thresholds (DETRs).
    DECODE_NMS: ClassVar[bool] = True

    def __init__(
        self,
        *,
        size: str,
        task: str | None = None,
        nc: int = 80,
        names: dict[int, str] | list[str] | None = None,
        imgsz: int | None = None,
    ) -> None:
        if size not in self.SIZES:
            raise ConfigError(
                f"{self.FAMILY} has no size {size!r}; sizes: {', '.join(self.SIZES)}"
            )
        if task is None:  # the family's first task ("detect" for detection families)
            task = self.TASKS[0]
        if task not in self.TASKS:
            raise ConfigError(f"{self.FAMILY} does not support task {task!r}; tasks: {', '.join(self.TASKS)}")
        if not isinstance(nc, int) or nc < 1:
            raise ConfigError(f"nc must be a positive int, got {nc!r}")
        self.size = size
        self.task = task
        self.nc = nc
        self.names = normalise_names(names, nc)
        self.imgsz = int(imgsz or self.DEFAULT_IMGSZ)
        self.net: nn.Module = self.build_net(size=size, nc=nc, task=task)
        self.net.eval()
        self.fused = False
        self.ckpt_path: str | None = None
        self.train_args: dict[str, Any] = {}
        self._graphs: Any = None  # graphs.runner.PredictGraphs, created on first use
        self._prep: Any = None  # inference.Prepared: the prepared twin predict() runs
        self.is_twin = False
        self.quant: Any = None  # quantization state (libreyolo.quant), if any

    # ------------------------------------------------------------------ family hooks
    @classmethod
    def build_net(cls, *, size: str, nc: int, task: str) -> nn.Module:
        """Build the network: Tensor[B, 3, H, W] float in [0, 1] -> raw head outputs."""
        raise NotImplementedError

    def postprocess(
        self, raw: Any, *, conf: float, iou: float, classes: list[int] | None, max_det: int, agnostic: bool
    ) -> list[Tensor]:
        """Raw head outputs -> per image: with ``OUTPUT_KIND == "boxes"`` Tensor[n, 6] (x1, y1, x2, y2,
        conf, cls in input pixels); with ``"probs"`` Tensor[nc] class probabilities."""
        raise NotImplementedError

    def build_criterion(self) -> Any:
        """The training loss: ``criterion(raw, batch) -> (loss, loss_items)``."""
        raise NotImplementedError(f"{self.FAMILY} has no training criterion")

    def on_close_mosaic(self, criterion: Any) -> None:
        """Hook: called when strong augmentation is switched off for the last epochs."""

    def train_stages(self) -> list[Stage] | None:
        """The training forward as stages when it is split at a seam (SPEC G-9): the first,
        capturable stage must return exactly what train-mode ``net(x)`` returns; the remaining
        stages run inside the criterion. ``None`` (default): the whole network is one stage."""
        return None

    def forward_stages(self) -> list[Stage]:
        """The forward as a chain of stages (SPEC G-9). Default: one capturable stage."""
        return [Stage(name="net", fn=self.net, capturable=True)]

    def decode(self, raw: Any) -> Tensor:
        """Raw head outputs -> Tensor[B, DECODE_TOPK, 6] float32 candidates (x1, y1, x2, y2 in
        input pixels, score, class id), sorted by decreasing score. A pure, shape-static function
        of ``raw`` (no host sync, no data-dependent shape): it runs inside the prediction graph."""
        raise NotImplementedError(f"{self.FAMILY} has no captured decode (DECODE_TOPK = 0)")

    def predict_stages(self) -> list[Stage]:
        """:meth:`forward_stages` with :meth:`decode` appended to the last capturable stage, so
        that one graph holds network and decode. Without a decode: :meth:`forward_stages`."""
        stages = self.forward_stages()
        if not self.DECODE_TOPK:
            return stages
        last = stages[-1]
        fn, decode = last.fn, self.decode
        if last.capturable:
            return [*stages[:-1], Stage(name=f"{last.name}+decode", fn=lambda v: decode(fn(v)), capturable=True)]
        return [*stages, Stage(name="decode", fn=decode, capturable=True)]

    def _cached(self, key: Any, build: Any) -> Any:
        """Memoised constant of the decode (anchor grids per feature shape and device), shared
        with the prepared twin. Built outside any capture: the eager warm-up runs first."""
        cache = self.__dict__.setdefault("_decode_cache", {})
        if key not in cache:
            cache[key] = build()
        return cache[key]

    def _per_level(self, name: str, feats: list[Tensor], build: Any) -> Any:
        """``build(feature shapes, net.strides, device=...)`` (an anchor or grid table of a dense
        head), memoised per feature shapes and device through :meth:`_cached`."""
        shapes = tuple(tuple(int(v) for v in f.shape[2:]) for f in feats)
        device = feats[0].device
        strides = tuple(int(s) for s in self.net.strides)
        return self._cached((name, shapes, str(device)), lambda: build(list(shapes), strides, device=device))

    # ------------------------------------------------------------------ device / state
    @property
    def device(self) -> torch.device:
        p = first_parameter(self.net)
        return p.device if p is not None else torch.device("cpu")

    @property
    def stride(self) -> int:
        return self.STRIDE

    def to(self, device: str | torch.device) -> Family:
        """Move the model. Moving relocates parameters, so captured graphs are dropped (G-8)."""
        device = select_device(device)
        if device != self.device:
            self.invalidate_graphs(f"model moved from {self.device} to {device}")
            self.net.to(device)
        return self

    def prepared(self, *, half: bool = False, fuse: bool = True) -> Family:
        """The inference twin ``predict()`` runs: fused (unless ``fuse=False``), cast once to
        half precision when ``half`` (float16 on CUDA, bfloat16 on CPU), channels-last where the
        family measured it wins. Built on first use and rebuilt when the weights change; this
        model's own network, training and checkpoints are untouched (see
        :mod:`libreyolo.models._base.inference`).

        Example:
            >>> twin = LibreYOLO("LibreYOLO9t.pt").prepared(half=False)  # doctest: +SKIP
            >>> twin.fused  # doctest: +SKIP
            True
        """
        from .inference import Prepared, prep_spec

        if self.is_twin:
            return self
        if self._prep is None:
            self._prep = Prepared()
        return self._prep.get(self, prep_spec(self, half=half, fuse=fuse))

    def _drop_prepared(self) -> None:
        if self._prep is not None:
            self._prep.drop()

    def fuse(self) -> Family:
        """Fold BatchNorm into convolutions and merge re-parameterisable branches for inference.

        Parameters are replaced, so captured graphs are dropped. A fused model cannot train.
        """
        if not self.fused:
            fuse = getattr(self.net, "fuse", None)
            if fuse is not None:
                self.invalidate_graphs("model fused (parameters replaced)")
                fuse()
            self.fused = True
        return self

    def invalidate_graphs(self, reason: str) -> None:
        """Drop captured graphs (parameters moved or were replaced), the prepared twin's too."""
        if self._graphs is not None:
            self._graphs.invalidate(reason)
        self._drop_prepared()

    def load_weights(self, state_dict: dict[str, Tensor], *, strict: bool = True) -> None:
        """Copy weights into the existing parameters (addresses kept, graphs stay valid)."""
        from ...io.checkpoint import load_state_into

        load_state_into(self, state_dict, strict=strict)
        self._drop_prepared()

    def save(self, path: str | Path, **extra: Any) -> Path:
        """Write a checkpoint (weights + metadata), atomically."""
        from ...io.checkpoint import save_model

        return save_model(self, Path(path), extra=extra)

    def info(self) -> dict[str, Any]:
        n = sum(p.numel() for p in self.net.parameters())
        return {"family": self.FAMILY, "size": self.size, "task": self.task, "nc": self.nc,
                "params": n, "imgsz": self.imgsz, "fused": self.fused}

    def __repr__(self) -> str:
        i = self.info()
        return f"{type(self).__name__}(size={i['size']!r}, task={i['task']!r}, nc={i['nc']}, params={i['params']:,})"

    # ------------------------------------------------------------------ network step
    def forward(self, x: Tensor, *, cuda_graph: CudaGraphPolicy = False, amp_dtype: torch.dtype | None = None,
                decoded: bool = False) -> Any:
        """Run the network on a preprocessed batch (Tensor[B, 3, H, W] float in [0, 1]).

        With ``cuda_graph`` True/"auto" the capturable stages replay from CUDA graphs. With
        ``decoded`` the family's :meth:`decode` follows the network (in the same graph).
        """
        from ...graphs.runner import check_policy

        policy = check_policy(cuda_graph)
        if policy is False:
            return self.eager_forward(x, amp_dtype=amp_dtype, decoded=decoded)
        return self.graphs.run(x, policy=policy, amp_dtype=amp_dtype, decoded=decoded)

    def eager_forward(self, x: Tensor, *, amp_dtype: torch.dtype | None = None, decoded: bool = False) -> Any:
        """The eager contract every replay must equal bit for bit."""
        from ...graphs.seam import run_eager

        with torch.inference_mode(), autocast(x.device, amp_dtype):
            return run_eager(self.predict_stages() if decoded else self.forward_stages(), x)

    # ------------------------------------------------------------------ CUDA graphs (G-3)
    @property
    def graphs(self) -> Any:
        if self._graphs is None:
            from ...graphs.runner import PredictGraphs

            self._graphs = PredictGraphs(self)
        return self._graphs

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
            >>> model = LibreYOLO("LibreYOLO9t.pt").to("cuda")  # doctest: +SKIP
            >>> model.capture_graph(imgsz=(480, 640), batch=1, half=True)  # doctest: +SKIP
        """
        from .inference import capture_prediction_graph

        return capture_prediction_graph(self, imgsz=imgsz, batch=batch, dtype=dtype, half=half, fuse=fuse)

    def graph_info(self) -> dict[str, Any]:
        """Captured graphs (shape, dtype, device, replays, capture ms) and eager-fallback reasons.

        After ``predict`` these are the prepared model's graphs (see :meth:`prepared`)."""
        from .inference import prediction_graph_info

        return prediction_graph_info(self)

    def release_graphs(self) -> None:
        """Free every captured graph and its memory pool (the prepared model's too)."""
        if self._graphs is not None:
            self._graphs.release()
        twin_graphs = self._prep.graphs_of_twin() if self._prep is not None else None
        if twin_graphs is not None:
            twin_graphs.release()

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

        Example:
            >>> from libreyolo import LibreYOLO, SAMPLE_IMAGE
            >>> results = LibreYOLO("LibreYOLO9t.pt")(SAMPLE_IMAGE, conf=0.25)
            >>> results[0].boxes.xyxy.shape[-1]
            4
        """
        from ...engine.predictor import PredictOptions, predict

        opts = PredictOptions.build(
            model=self, conf=conf, iou=iou, imgsz=imgsz, classes=classes, max_det=max_det,
            device=device, batch=batch, save=save, save_dir=save_dir, cuda_graph=cuda_graph,
            half=half, agnostic_nms=agnostic_nms, bgr=bgr, fuse=fuse, rect=rect, vid_stride=vid_stride,
            save_txt=save_txt, save_conf=save_conf, save_crop=save_crop, line_width=line_width, show=show,
            verbose=verbose,
        )
        gen = predict(self, source, opts)
        return gen if stream else list(gen)

    __call__ = predict

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
            >>> model = LibreYOLO("LibreYOLO9t.pt")  # doctest: +SKIP
            >>> for r in model.track("clip.mp4", stream=True):  # doctest: +SKIP
            ...     print(r.frame, r.boxes.id.tolist())
        """
        from ...engine.predictor import PredictOptions
        from ...trackers.track import track

        opts = PredictOptions.build(
            model=self, conf=conf, iou=iou, imgsz=imgsz, classes=classes, max_det=max_det,
            device=device, batch=batch, save=save, save_dir=save_dir, cuda_graph=cuda_graph,
            half=half, agnostic_nms=agnostic_nms, bgr=bgr, fuse=fuse, rect=rect, vid_stride=vid_stride,
            save_txt=save_txt, save_conf=save_conf, save_crop=save_crop, line_width=line_width, show=show,
            verbose=verbose,
        )
        gen = track(self, source, opts, tracker=tracker, persist=persist)
        return gen if stream else list(gen)

    def train(self, **overrides: Any) -> dict[str, Any]:
        """Train on a YOLO-format dataset; keys as in :class:`libreyolo.training.config.TrainConfig`.

        Example:
            >>> model = LibreYOLO("LibreYOLO9t.pt")  # doctest: +SKIP
            >>> model.train(data="shapes", epochs=1, imgsz=320)  # doctest: +SKIP
        """
        from ...training.trainer import train

        self._drop_prepared()  # the inference twin (a copy of the network and its graphs) is rebuilt after
        return train(self, overrides)

    def val(self, **overrides: Any) -> dict[str, float]:
        """Validate on a dataset; returns COCO-style metrics (mAP50-95, mAP50, precision, recall)."""
        from ...engine.validator import validate

        return validate(self, overrides)

    def export(self, **overrides: Any) -> Path:
        """Export the network (e.g. ``format="onnx"``); the exported graph holds portable math."""
        from ...export import export

        return export(self, overrides)

    # quantization (libreyolo/quant) ---------------------------------------------
    def quantize(self, **overrides: Any) -> Family:
        """Quantize (fp8 or int8 recipes); drops captured graphs (G-8)."""
        from ...quant.model import quantize_model

        self.invalidate_graphs("model quantized")
        quantize_model(self, overrides)
        return self

    def dequantize(self) -> Family:
        from ...quant.model import dequantize_model

        self.invalidate_graphs("model dequantized")
        dequantize_model(self)
        return self

    def quant_info(self) -> dict[str, Any]:
        from ...quant.model import quant_info

        return quant_info(self)

