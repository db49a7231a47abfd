"""The Family base class: the description of one model architecture.

A family subclass supplies the network (:meth:`Family.build_net`), turns raw head outputs into
detections (:meth:`Family.postprocess`) and, for training, a criterion (:meth:`Family.build_criterion`);
its ClassVars declare what it can do. It knows nothing of prediction, training or export: the
user-facing object is :class:`libreyolo.model.Model` (what ``LibreYOLO(...)`` returns), which owns
a family and a backend (:mod:`libreyolo.backends`) and offers the verbs. Shared code asks the
family for capabilities instead of naming families (DESIGN convention 1).

This module imports only ``device``, ``errors`` and ``graphs.seam`` (the house order, tested by
``tests/unit/test_import_order.py``).
"""

from __future__ import annotations

import logging
from typing import Any, ClassVar, Literal

import torch
from torch import Tensor, nn

from ...device import autocast, first_parameter, select_device  # noqa: F401 - select_device re-exported
from ...errors import ConfigError
from ...graphs.seam import Stage, run_eager
from .names import normalise_names

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
    # Architecture variants (``model.arch`` values) whose own parity rows all pass while the
    # default architecture's do not (``SUPPORTS_CUDA_GRAPH = False``): an instance set to one of
    # them may replay prediction graphs. A CPU test holds each entry to the committed matrix.
    CUDA_GRAPH_VARIANTS: ClassVar[tuple[dict[str, Any], ...]] = ()
    SUPPORTS_TRAIN_CUDA_GRAPH: ClassVar[bool] = False
    TRAIN_CUDA_GRAPH_REASON: ClassVar[str] = "no training-capture parity run recorded for this family"

    # Inference preparation (models/_base/inference.py): run the prepared twin in channels-last
    # memory format on CUDA (set per family from benchmarks/layout_predict.py).
    INFER_CHANNELS_LAST: ClassVar[bool] = False
    # The layout of the half-precision twin when it differs from the fp32 one (None: the same as
    # INFER_CHANNELS_LAST). cuDNN's NCHW float16 convolutions transpose to NHWC around each call,
    # so a family whose fp32 graph is fastest in NCHW can still run half precision faster, eager
    # and captured, in channels-last (benchmarks/results/peer/families, layout/ba). Both predict
    # modes run the same twin, so eager and graph still compute the same bits.
    HALF_CHANNELS_LAST: ClassVar[bool | None] = None
    # Prediction graphs warm up and capture with the fused conv epilogue (bias add + SiLU in one
    # kernel, layers/conv.graph_bias_act): on for a family once its parity rows were regenerated
    # with it (the rows prove the replay with the fused kernel equals the eager forward without).
    # "channels_last": only for a twin in channels-last format (in NCHW cuDNN adds the bias inside
    # the convolution, rounding once where the two-step eager epilogue rounds twice, so 14 of 32
    # NCHW rows of yolox / rtmdet were not bitwise: commit accc88c).
    GRAPH_BIAS_ACT: ClassVar[bool | str] = False
    # A network captured as one stage is captured as this many graphs, cut at boundaries between
    # the network's top-level modules (graphs/runner.py: chunk_cuts) and replayed back to back, so
    # the GPU starts the first while the host still launches the rest. 1: one graph per stage.
    # Raised for a family only with parity rows captured that way (benchmarks/graph_chunks.py); on
    # yolo9-t (session U) 2-4 graphs were bitwise and no faster end to end, so none sets it.
    GRAPH_CHUNKS: ClassVar[int] = 1
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
    # Parts of the network added after checkpoints of the family were already saved: state-dict
    # keys starting with one of these may be missing from a file (libreyolo.io.checkpoint.
    # load_state_into); they keep the values the fresh network was built with. Any other missing
    # key is still an error.
    OPTIONAL_STATE_PREFIXES: ClassVar[tuple[str, ...]] = ()

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
            from .registry import task_unsupported

            raise ConfigError(task_unsupported(type(self), task))
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
        self.is_twin = False  # a prepared inference copy (models/_base/inference.build_twin)
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

    def cuda_graph_refusal(self) -> str | None:
        """Why this instance's architecture may not replay prediction graphs although the family
        flag allows them (``SUPPORTS_CUDA_GRAPH`` covers the default architecture's parity rows),
        or ``None``. Default: ``None``."""
        return None

    def cuda_graph_variant(self) -> bool:
        """Whether this instance runs an architecture variant proven for prediction graphs although
        the family's default architecture is not (``CUDA_GRAPH_VARIANTS``)."""
        return bool(self.CUDA_GRAPH_VARIANTS) and dict(self.arch) in [dict(v) for v in self.CUDA_GRAPH_VARIANTS]

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
        """Move the network. (Through a model, ``Model.to`` first drops the captured graphs.)"""
        self.net.to(select_device(device))
        return self

    def fuse(self) -> Family:
        """Fold BatchNorm into convolutions and merge re-parameterisable branches for inference.
        Parameters are replaced; a fused network cannot train."""
        if not self.fused:
            fuse = getattr(self.net, "fuse", None)
            if fuse is not None:
                fuse()
            self.fused = True
        return self

    def info(self) -> dict[str, Any]:
        n = sum(p.numel() for p in self.net.parameters())
        return {"family": self.FAMILY, "size": self.size, "task": self.task, "nc": self.nc,
                "params": n, "imgsz": self.imgsz, "fused": self.fused}

    def __repr__(self) -> str:
        i = self.info()
        return f"{type(self).__name__}(size={i['size']!r}, task={i['task']!r}, nc={i['nc']}, params={i['params']:,})"

    # ------------------------------------------------------------------ network step
    def eager_forward(self, x: Tensor, *, amp_dtype: torch.dtype | None = None, decoded: bool = False) -> Any:
        """The eager contract every replay must equal bit for bit."""
        with torch.inference_mode(), autocast(x.device, amp_dtype):
            return run_eager(self.predict_stages() if decoded else self.forward_stages(), x)
