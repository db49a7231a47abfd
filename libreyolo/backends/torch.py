"""The PyTorch backend: a family's network run eagerly or replayed from CUDA graphs.

A :class:`TorchBackend` owns what running a :class:`~libreyolo.models._base.family.Family`'s
network needs beyond the architecture: its prediction graphs
(:class:`~libreyolo.graphs.runner.PredictGraphs`, created on first use) and its prepared
inference twin (:mod:`libreyolo.models._base.inference`: fused, cast once to half precision,
channels-last where it wins), which is a family of its own with a backend of its own, so its
graphs are its own too.

Reads of architecture attributes (``net``, ``postprocess``, ``DECODE_TOPK``, ``names``...) fall
through to the family, so code that runs "a model" (the predictor, the validator, the parity
harness) can be handed a backend or a :class:`~libreyolo.model.Model` alike.
"""

from __future__ import annotations

import logging
from collections import OrderedDict
from typing import TYPE_CHECKING, Any

import torch
from torch import Tensor

from ..device import select_device
from ..graphs.runner import PredictGraphs, check_policy
from ..graphs.seam import run_eager  # noqa: F401 - the eager contract (re-exported for callers)
from ..models._base.inference import (
    Fingerprint,
    PrepSpec,
    build_twin,
    channels_last,
    half_dtype,
    input_dtype,
    prep_spec,
)

if TYPE_CHECKING:
    from ..models._base.family import Family

logger = logging.getLogger(__name__)

__all__ = ["TorchBackend"]


class TorchBackend:
    """Runs ``family.net``: eager, or from CUDA graphs under ``cuda_graph=True/"auto"`` (G-3).

    Example:
        >>> from libreyolo.models.yolo9.family import YOLO9
        >>> backend = TorchBackend(YOLO9(size="t", nc=2))
        >>> raw = backend.forward(torch.zeros(1, 3, 64, 64))
        >>> len(raw)
        3
    """

    kind = "torch"
    exported = False  # a PyTorch network: trainable, exportable, capturable
    GRAPH_PROLOGUE = True  # forward() takes a prologue (run inside the graph on a replay) and host=

    def __init__(self, family: Family) -> None:
        self.family = family
        self._graphs: PredictGraphs | None = None
        self._prep: _Prepared | None = None
        self._head: tuple[int, Any] | None = None  # (nc, names) the graphs and twins were made for

    def __getattr__(self, name: str) -> Any:  # architecture attributes come from the family
        if name.startswith("__") or name in ("family", "_graphs", "_prep", "_head"):
            raise AttributeError(name)
        return getattr(self.family, name)

    # ------------------------------------------------------------------ network step
    @property
    def device(self) -> torch.device:
        return self.family.device

    def forward(self, x: Tensor, *, cuda_graph: Any = False, amp_dtype: torch.dtype | None = None,
                decoded: bool = False, prologue: Any = None, host: bool = False) -> Any:
        """Run the network on a preprocessed batch (Tensor[B, 3, H, W] float in [0, 1]).

        With ``cuda_graph`` True/"auto" the capturable stages replay from CUDA graphs; with
        ``decoded`` the family's decode follows the network (in the same graph). ``prologue``: a
        step applied to ``x`` first (inside the graph when one replays: the pixel normalisation
        predict leaves to it); ``host``: a replay hands back host tensors (:meth:`PredictGraphs.run`)."""
        policy = check_policy(cuda_graph)
        if policy is False:
            return self.family.eager_forward(prologue(x) if prologue is not None else x, amp_dtype=amp_dtype,
                                             decoded=decoded)
        self._check_head()
        return self.graphs.run(x, policy=policy, amp_dtype=amp_dtype, decoded=decoded, prologue=prologue,
                               host=host)

    def eager_forward(self, x: Tensor, *, amp_dtype: torch.dtype | None = None, decoded: bool = False) -> Any:
        """The eager contract every replay must equal bit for bit."""
        return self.family.eager_forward(x, amp_dtype=amp_dtype, decoded=decoded)

    # ------------------------------------------------------------------ CUDA graphs
    @property
    def graphs(self) -> PredictGraphs:
        if self._graphs is None:
            self._graphs = PredictGraphs(self.family)
        return self._graphs

    def use_graphs(self, graphs: PredictGraphs) -> None:
        """Replace this backend's graph runner (the parity harness and benchmarks force capture
        on families that have not opted in: ``PredictGraphs(family, force=True)``)."""
        if self._graphs is not None:
            self._graphs.release()
        self._graphs = graphs

    def invalidate(self, reason: str) -> None:
        """Drop captured graphs (parameters moved or were replaced) and the prepared twin."""
        if self._graphs is not None:
            self._graphs.invalidate(reason)
        self.drop_prepared()

    def _check_head(self) -> None:
        """Drop graphs and twins made for another class head: the family's ``nc`` changed or its
        ``names`` were rebound (a zero-shot ``set_classes`` / ``set_class_embeddings``, which may
        also replace the head module: the parameter fingerprints do not see a replaced module)."""
        fam, seen = self.family, self._head
        if seen is not None and (seen[0] != fam.nc or seen[1] is not fam.names):
            self.invalidate(f"class head changed (nc {seen[0]} -> {fam.nc}, names rebound)")
        self._head = (fam.nc, fam.names)

    def release(self) -> None:
        """Free every captured graph and its memory pool (the prepared twin's too)."""
        if self._graphs is not None:
            self._graphs.release()
        for twin, _ in (self._prep.cache.values() if self._prep is not None else ()):
            if twin is not self:
                twin.release()

    # ------------------------------------------------------------------ state
    def to(self, device: str | torch.device) -> TorchBackend:
        """Move the network; moving relocates parameters, so captured graphs are dropped (G-8)."""
        device = select_device(device)
        if device != self.family.device:
            self.invalidate(f"model moved from {self.family.device} to {device}")
            self.family.to(device)
        return self

    def fuse(self) -> None:
        """Fuse the family's network in place (parameters replaced: graphs are dropped first)."""
        if not self.family.fused:
            if getattr(self.family.net, "fuse", None) is not None:
                self.invalidate("model fused (parameters replaced)")
            self.family.fuse()

    # ------------------------------------------------------------------ the prepared twin
    def prepared(self, *, half: bool = False, fuse: bool = True) -> TorchBackend:
        """The backend of the inference twin ``predict()`` runs (fused unless ``fuse=False``,
        cast once to half precision when ``half``, channels-last where the family measured it
        wins); built on first use and rebuilt when the weights or the class head (``nc``,
        ``names``) change. Itself when nothing needs preparing."""
        if getattr(self.family, "is_twin", False):
            return self
        self._check_head()
        if self._prep is None:
            self._prep = _Prepared(self)
        fam = self.family
        key = (half, fuse, fam.fused, fam.device, fam.HALF_CAST, fam.INFER_CHANNELS_LAST, fam.HALF_CHANNELS_LAST)
        spec = self._prep.specs.get(key)
        if spec is None:  # a PrepSpec per input of prep_spec, built once
            spec = self._prep.specs[key] = prep_spec(fam, half=half, fuse=fuse)
        return self._prep.get(spec)

    def drop_prepared(self) -> None:
        if self._prep is not None:
            self._prep.drop()

    def capture(self, *, imgsz: Any, batch: int, dtype: torch.dtype | None, half: bool | None,
                fuse: bool) -> dict[str, Any]:
        """Capture, on the prepared twin, the graph ``predict`` replays (network + decode) for a
        ``(batch, 3, *imgsz)`` input, under autocast where the twin keeps fp32 weights for
        ``half`` (as predict does); returns its ``graph_info()`` row."""
        from ..errors import ConfigError
        from ..ops.letterbox import check_imgsz

        fam = self.family
        hw = check_imgsz(imgsz if imgsz is not None else fam.imgsz, stride=fam.stride)
        if isinstance(batch, bool) or not isinstance(batch, int) or batch < 1:
            raise ConfigError(f"batch must be a positive int, got {batch!r}")
        if half is None:
            half = dtype is not None and dtype != torch.float32
        twin = self.prepared(half=bool(half), fuse=fuse)
        fmt = torch.channels_last if channels_last(twin.family) else torch.contiguous_format
        amp = half_dtype(fam.device) if half and input_dtype(twin.family) == torch.float32 else None
        return twin.graphs.capture((batch, 3, *hw), amp_dtype=amp, input_dtype=input_dtype(twin.family),
                                   decoded=bool(fam.DECODE_TOPK), memory_format=fmt)

    def graph_info(self) -> dict[str, Any]:
        """The prepared twin's graphs once it exists (else this backend's own), with a
        ``prepared`` entry saying how the twin was prepared."""
        twin = self._prep.twin if self._prep is not None else None
        own_twin = twin is not None and twin is not self
        info = (twin.graphs if own_twin and twin._graphs is not None else self.graphs).info()
        if twin is not None:
            t = twin.family
            info["prepared"] = {"fused": bool(t.fused), "dtype": str(input_dtype(t)).removeprefix("torch."),
                                "channels_last": channels_last(t), "decode_in_graph": bool(t.DECODE_TOPK)}
        return info

    def __repr__(self) -> str:
        return f"TorchBackend({self.family!r})"


class _Prepared:
    """The cached twin backends of one backend, by how they were prepared: the last
    :data:`MAX_TWINS` specs used (e.g. fp32 and ``half=True``) stay built, with their graphs, so
    alternating between them does not re-fuse, re-cast and re-capture on every call. Any change of
    the owner's weights makes every cached twin stale (rebuilt on its next use). ``twin`` /
    ``spec``: the one used last."""

    MAX_TWINS = 2

    def __init__(self, owner: TorchBackend) -> None:
        self.owner = owner
        self.spec: PrepSpec | None = None
        self.twin: TorchBackend | None = None
        self.cache: OrderedDict[PrepSpec, tuple[TorchBackend, Fingerprint]] = OrderedDict()
        self.specs: dict[tuple[Any, ...], PrepSpec] = {}

    def get(self, spec: PrepSpec) -> TorchBackend:
        net = self.owner.family.net
        if spec is self.spec:  # the twin of the last call, if the weights did not change since
            hit = self.cache.get(spec)
            if hit is not None and not hit[1].stale(net):
                return hit[0]
        hit = self.cache.get(spec)
        if hit is None or hit[1].stale(net):
            for key in [k for k, (_, fp) in self.cache.items() if k == spec or fp.stale(net)]:
                self._release(self.cache.pop(key)[0])
            twin = build_twin(self.owner.family, spec)
            hit = (self.owner if twin is self.owner.family else TorchBackend(twin), Fingerprint(net))
            self.cache[spec] = hit
            while len(self.cache) > self.MAX_TWINS:
                self._release(self.cache.popitem(last=False)[1][0])
        self.cache.move_to_end(spec)
        self.twin, self.spec = hit[0], spec
        return hit[0]

    def _release(self, twin: TorchBackend) -> None:
        if twin is not self.owner:
            twin.release()

    def drop(self) -> None:
        for twin, _ in self.cache.values():
            self._release(twin)
        self.cache.clear()
        self.specs.clear()
        self.twin, self.spec = None, None
