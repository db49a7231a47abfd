"""CUDA graphs for prediction (SPEC G-1..G-10).

Each model owns one :class:`PredictGraphs`. It keys graphs by (input shape, dtype, device),
captures per the policy (``True``: first sight of a key; ``"auto"``: second sight), replays on a
hit, and copies outputs out before returning so the next replay cannot overwrite them.

Two halves, so that the decisions are testable without a GPU:

* :func:`graph_refusal` and :class:`GraphBook` decide (refusals, the ``"auto"`` counter, the
  least-recently-used cache, eviction, invalidation bookkeeping). Pure Python, no CUDA.
* :func:`_capture_entry` / :func:`_replay_entry` do the CUDA work: warm-up on a side stream,
  capture of each capturable :class:`~libreyolo.graphs.seam.Stage` into one memory pool per
  model with ``capture_error_mode="thread_local"`` (G-7), replay with eager stages in between.
"""

from __future__ import annotations

import logging
import threading
import time
import weakref
from collections import OrderedDict
from contextlib import nullcontext
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, Generic, Literal, TypeVar

import torch
from torch import Tensor

from .. import env
from ..device import autocast
from ..errors import ConfigError, GraphCaptureError
from ..layers.conv import graph_bias_act
from ..models._base.inference import uses_graph_bias_act
from .recovery import no_gc, recover_after_failed_capture
from .seam import Stage, TreeSpec, flatten, unflatten

if TYPE_CHECKING:
    from ..models._base.family import Family

logger = logging.getLogger(__name__)

WARMUP_ITERS = 3  # eager iterations on the capture stream before capture (cuDNN/Triton autotune, lazy init)
SEEN_PER_SLOT = 4  # the "auto" counter remembers up to capacity * SEEN_PER_SLOT unseen-twice shapes
KEEP_INVALIDATIONS = 16

Decision = Literal["replay", "capture", "eager"]
E = TypeVar("E")


def check_policy(value: Any) -> Any:
    """Validate a ``cuda_graph`` value (G-1): exactly ``False``, ``True`` or ``"auto"``."""
    if value is False or value is True or (isinstance(value, str) and value == "auto"):
        return value
    raise ConfigError(f"cuda_graph must be False, True or 'auto', got {value!r}")


@dataclass(frozen=True, kw_only=True)
class GraphKey:
    """What a graph is valid for: one input shape, compute dtype, input dtype and device."""

    shape: tuple[int, ...]
    dtype: str  # compute dtype: the autocast dtype, else the input dtype
    input_dtype: str
    device: str
    head: str = "raw"  # "raw": the network's outputs; "decoded": network + the family's decode
    prologue: str = ""  # the name of a step captured before the network (e.g. the pixel normalisation)

    def __post_init__(self) -> None:  # hashed on every replay: once here instead
        object.__setattr__(self, "_hash", hash((self.shape, self.dtype, self.input_dtype, self.device, self.head,
                                                self.prologue)))

    def __hash__(self) -> int:
        return self._hash

    @classmethod
    def of(cls, x: Tensor, amp_dtype: torch.dtype | None, *, decoded: bool = False, prologue: Any = None) -> GraphKey:
        compute = amp_dtype if amp_dtype is not None and amp_dtype != torch.float32 else x.dtype
        if prologue is not None:
            compute = _prologue_dtype(prologue, compute)
        return cls(shape=tuple(x.shape), dtype=_dtype_name(compute),
                   input_dtype=_dtype_name(x.dtype), device=str(x.device), head="decoded" if decoded else "raw",
                   prologue=prologue.name if prologue is not None else "")


def _prologue_dtype(prologue: Any, default: torch.dtype) -> torch.dtype:
    """The dtype a prologue hands the network (its ``dtype`` attribute, else ``default``)."""
    dt = getattr(prologue, "dtype", None)
    return dt if isinstance(dt, torch.dtype) else default


def with_prologue(stages: list[Stage], prologue: Any) -> list[Stage]:
    """``stages`` with ``prologue`` run first: inside the first stage when that one is captured (one
    graph holds both), else as a captured stage of its own before it."""
    if prologue is None:
        return stages
    first = stages[0]
    if first.capturable:
        fn = first.fn
        return [Stage(name=f"prologue+{first.name}", fn=lambda v: fn(prologue(v)), capturable=True), *stages[1:]]
    return [Stage(name="prologue", fn=prologue, capturable=True), *stages]


def _dtype_name(dtype: torch.dtype) -> str:
    return str(dtype).removeprefix("torch.")


# =========================================================================== decisions (CPU)
def graph_refusal(*, family: str, supported: bool, reason: str, policy: Any, device: torch.device,
                  force: bool = False) -> str | None:
    """Decide whether graphs may be used; ``None`` if so, else why the call runs eager.

    Raises:
        NotImplementedError: ``True``/``"auto"`` on a family that has not opted in (G-5).
        ConfigError (a ValueError): ``True`` on a non-CUDA device.
    """
    policy = check_policy(policy)
    if policy is False:
        return "cuda_graph=False"
    if not supported and not force:
        raise NotImplementedError(
            f"family {family!r} does not support CUDA graphs for prediction (SUPPORTS_CUDA_GRAPH = False: "
            f"{reason}). Graph replay is only enabled after a bitwise parity run "
            "(benchmarks/parity_predict.py); predict with cuda_graph=False."
        )
    if device.type != "cuda":
        if policy is True:
            raise ConfigError(
                f"cuda_graph=True, but the input is on {device}: CUDA graphs need a CUDA device. "
                "Move the model with device='cuda' (or model.to('cuda')), or pass cuda_graph=False / 'auto'."
            )
        return f"cuda_graph='auto' on {device}: CUDA graphs need a CUDA device, so this call ran eager"
    return None


class GraphBook(Generic[E]):
    """Bookkeeping of a graph cache: policy decisions, LRU order, counters. No CUDA.

    Example:
        >>> book = GraphBook(capacity=2)
        >>> book.decide("k", policy="auto"), book.decide("k", policy="auto")
        ('eager', 'capture')
    """

    def __init__(self, *, capacity: int) -> None:
        if isinstance(capacity, bool) or not isinstance(capacity, int) or capacity < 1:
            raise ConfigError(f"the CUDA-graph cache size must be a positive int, got {capacity!r} "
                              "(set LIBREYOLO_GRAPH_CACHE_SIZE to 1 or more)")
        self.capacity = capacity
        self.entries: OrderedDict[Any, E] = OrderedDict()  # oldest first
        self.seen: OrderedDict[Any, int] = OrderedDict()  # sightings of keys without a graph
        self.stats = {"calls": 0, "replays": 0, "captures": 0, "eager_runs": 0, "auto_waits": 0,
                      "evictions": 0}
        self._eviction_logged = False

    def decide(self, key: Any, *, policy: Any) -> Decision:
        """Count one sighting of ``key`` and say what to do (policy is True or "auto")."""
        self.stats["calls"] += 1
        if key in self.entries:
            self.entries.move_to_end(key)
            return "replay"
        n = self.seen.pop(key, 0) + 1
        if policy is True or n >= 2:
            return "capture"
        self.seen[key] = n
        while len(self.seen) > self.capacity * SEEN_PER_SLOT:
            self.seen.popitem(last=False)
        self.stats["auto_waits"] += 1
        return "eager"

    def get(self, key: Any) -> E | None:
        return self.entries.get(key)

    def store(self, key: Any, entry: E) -> list[tuple[Any, E]]:
        """Add a captured entry, evicting least-recently-used ones beyond capacity; returns them."""
        evicted = []
        self.seen.pop(key, None)
        while len(self.entries) >= self.capacity and key not in self.entries:
            old_key, old = self.entries.popitem(last=False)
            evicted.append((old_key, old))
            self.stats["evictions"] += 1
            log = logger.debug if self._eviction_logged else logger.warning
            log("CUDA-graph cache full (%d graphs, LIBREYOLO_GRAPH_CACHE_SIZE): evicted the least recently "
                "used graph %s%s", self.capacity, old_key,
                "" if self._eviction_logged else "; later evictions are logged at DEBUG level")
            self._eviction_logged = True
        self.entries[key] = entry
        self.entries.move_to_end(key)
        self.stats["captures"] += 1
        return evicted

    def drop_all(self) -> list[E]:
        """Forget every entry and every sighting; returns the dropped entries."""
        dropped = list(self.entries.values())
        self.entries.clear()
        self.seen.clear()
        return dropped


# =========================================================================== CUDA work
@dataclass(kw_only=True)
class CapturedStage:
    """One capturable stage held in a CUDA graph: static input buffers in, static outputs out."""

    name: str
    graph: Any  # torch.cuda.CUDAGraph: the first (or only) graph of the stage
    in_spec: TreeSpec
    static_in: list[Tensor]
    static_out: Any  # tree of tensors living in the model's graph pool
    capture_ms: float
    graphs: list[Any] = field(default_factory=list)  # every graph of the stage, in replay order

    def replay(self) -> None:
        for g in self.graphs or (self.graph,):
            g.replay()


@dataclass(kw_only=True)
class GraphEntry:
    """Everything captured for one :class:`GraphKey`: the chain of captured and eager stages."""

    key: GraphKey
    steps: list[CapturedStage | Stage]
    warmup_ms: float
    capture_ms: float
    replays: int = 0
    sentinel: tuple[Any, ...] = field(default=())
    bias_act: bool = False  # captured with the fused conv epilogue (layers.conv.graph_bias_act)
    eager_bias_act: bool = False  # ... and it has eager stages, which replays run with it too
    _plain: Any = None  # (static input, stage, output leaves, output spec) of a one-stage entry; built once

    def plain(self) -> Any:
        """The entry as one captured stage with one input tensor (most networks), or ``False``:
        ``(static input, stage, output leaves, output spec)``, worked out on the first replay."""
        if self._plain is None:
            only = self.steps[0] if len(self.steps) == 1 else None
            if isinstance(only, CapturedStage) and len(only.static_in) == 1 and only.in_spec == flatten(
                    only.static_in[0])[1]:
                leaves, spec = flatten(only.static_out)
                self._plain = (only.static_in[0], only, leaves, spec)
            else:
                self._plain = False
        return self._plain

    def info(self) -> dict[str, Any]:
        stages = [
            {"name": s.name, "captured": True, "capture_ms": round(s.capture_ms, 3)}
            | ({"graphs": len(s.graphs)} if len(s.graphs) > 1 else {})
            if isinstance(s, CapturedStage) else {"name": s.name, "captured": False, "reason": s.reason}
            for s in self.steps
        ]
        return {"shape": list(self.key.shape), "dtype": self.key.dtype, "input_dtype": self.key.input_dtype,
                "bias_act": self.bias_act,
                "device": self.key.device, "head": self.key.head,
                **({"prologue": self.key.prologue} if self.key.prologue else {}), "replays": self.replays, "capture_ms": round(self.capture_ms, 3),
                "warmup_ms": round(self.warmup_ms, 3), "stages": stages}


def _param_sentinel(net: torch.nn.Module) -> tuple[Any, ...]:
    """(net, first/last parameter owner, name, address): cheap proof that parameters did not move."""
    owners = [(m, n) for m in net.modules() for n, p in m._parameters.items() if p is not None]
    if not owners:
        return (net,)
    (m0, n0), (m1, n1) = owners[0], owners[-1]
    return (net, m0, n0, m0._parameters[n0].data_ptr(), m1, n1, m1._parameters[n1].data_ptr())


def _sentinel_stale(sentinel: tuple[Any, ...], net: torch.nn.Module) -> bool:
    if not sentinel or sentinel[0] is not net:
        return True
    if len(sentinel) == 1:
        return False
    _, m0, n0, p0, m1, n1, p1 = sentinel
    a, b = m0._parameters.get(n0), m1._parameters.get(n1)
    return a is None or b is None or a.data_ptr() != p0 or b.data_ptr() != p1


def chunk_cuts(weights: list[int], chunks: int) -> list[int]:
    """Where to cut a stage into ``chunks`` graphs: ``weights`` are the sizes (leaf modules) of the
    top-level modules in the order their forwards finished during warm-up; returns the 1-based
    positions in that sequence after which a new graph starts, so that each graph holds about
    an equal share of the total. Never a cut after the last module (no empty trailing graph).

    Example:
        >>> chunk_cuts([1, 1, 1, 1, 1, 1], 3), chunk_cuts([10, 1, 1], 2), chunk_cuts([5], 4)
        ([2, 4], [1], [])
    """
    if chunks <= 1 or len(weights) < 2:
        return []
    total, run, cuts = sum(weights), 0, []
    for i, w in enumerate(weights[:-1], start=1):
        run += w
        if run * chunks >= total * (len(cuts) + 1):
            cuts.append(i)
            if len(cuts) == chunks - 1:
                break
    return cuts


class _Chunker:
    """Forward hooks on a network's top-level modules: during warm-up they record the order in
    which those modules finish (with their sizes); during capture they end the current graph and
    begin the next one at the planned cuts (:func:`chunk_cuts`). A cut between two module calls
    only splits the recorded kernel sequence: the graphs replayed in order run the same kernels
    on the same memory as one graph would."""

    def __init__(self, net: torch.nn.Module, chunks: int) -> None:
        self.chunks = chunks
        self.mods = [m for _, m in net.named_children()]
        self.size = {id(m): sum(1 for c in m.modules() if not c._modules) for m in self.mods}
        self.mode, self.order, self.cuts, self.count = "off", [], set(), 0
        self.graphs: list[Any] = []
        self.pool: Any = None
        self.handles = [m.register_forward_hook(self._hook) for m in self.mods] if chunks > 1 else []

    def _hook(self, mod: torch.nn.Module, args: Any, out: Any) -> None:
        if self.mode == "record":
            self.order.append(self.size[id(mod)])
        elif self.mode == "capture":
            self.count += 1
            if self.count in self.cuts:
                self.graphs[-1].capture_end()
                g = torch.cuda.CUDAGraph()
                g.capture_begin(pool=self.pool, capture_error_mode="thread_local")
                self.graphs.append(g)

    def plan(self) -> None:
        self.cuts, self.count = set(chunk_cuts(self.order, self.chunks)), 0

    def close(self) -> None:
        for h in self.handles:
            h.remove()
        self.handles = []


def _capture_graphs(fn: Any, val: Any, *, pool: Any, stream: Any, chunker: _Chunker | None) -> tuple[list[Any], Any]:
    """Capture ``fn(val)`` on ``stream`` into one graph, or into several at the chunker's cuts."""
    first = torch.cuda.CUDAGraph()
    if chunker is None or not chunker.handles:
        with torch.cuda.graph(first, pool=pool, stream=stream, capture_error_mode="thread_local"):
            out = fn(val)
        return [first], out
    chunker.plan()
    chunker.graphs, chunker.pool, chunker.mode = [first], pool, "capture"
    with torch.cuda.stream(stream):
        first.capture_begin(pool=pool, capture_error_mode="thread_local")
        try:
            out = fn(val)
        finally:
            chunker.mode = "off"
            chunker.graphs[-1].capture_end()
    return list(chunker.graphs), out


def _capture_entry(stages: list[Stage], x: Tensor, key: GraphKey, *, amp_dtype: torch.dtype | None,
                   pool: Any, stream: Any, warmup: int, bias_act: bool = False,
                   chunker: _Chunker | None = None) -> tuple[GraphEntry, Any]:
    """Warm up, then capture each capturable stage; returns the entry and the output for ``x``.

    x (Tensor[B, 3, H, W] on CUDA): the batch whose output is returned (one replay per stage).
    ``bias_act``: warm up and capture with the fused conv epilogue
    (:func:`~libreyolo.layers.conv.graph_bias_act`); the eager stages of replays use it too.
    ``chunker``: capture each capturable stage as several graphs (``Family.GRAPH_CHUNKS``); the
    cuts are planned from the module order the last warm-up iteration recorded.
    """
    device = x.device
    with torch.cuda.device(device), torch.inference_mode(), autocast(device, amp_dtype), graph_bias_act(bias_act):
        t0 = time.perf_counter()
        stream.wait_stream(torch.cuda.current_stream(device))
        with torch.cuda.stream(stream):
            for i in range(warmup):
                val: Any = x
                for st in stages:
                    if chunker is not None and i == warmup - 1 and st.capturable:
                        chunker.mode, chunker.order = "record", []
                    val = st.fn(val)
                    if chunker is not None:
                        chunker.mode = "off"
            del val
        torch.cuda.synchronize(device)
        warmup_ms = (time.perf_counter() - t0) * 1e3
        steps: list[CapturedStage | Stage] = []
        val = x
        for st in stages:
            if not st.capturable:
                val = st.fn(val)
                steps.append(st)
                continue
            leaves, spec = flatten(val)
            static_in = [t.detach().clone() for t in leaves]
            static_val = unflatten(spec, static_in)
            torch.cuda.synchronize(device)
            t1 = time.perf_counter()
            with no_gc():
                graphs, static_out = _capture_graphs(st.fn, static_val, pool=pool, stream=stream, chunker=chunker)
            torch.cuda.synchronize(device)
            ms = (time.perf_counter() - t1) * 1e3
            stage = CapturedStage(name=st.name, graph=graphs[0], in_spec=spec, static_in=static_in,
                                  static_out=static_out, capture_ms=ms, graphs=graphs)
            stage.replay()  # the capture ran nothing: compute this stage's output for x
            steps.append(stage)
            val = static_out
        out_leaves, out_spec = flatten(val)
        out = unflatten(out_spec, [t.clone() for t in out_leaves])
    capture_ms = sum(s.capture_ms for s in steps if isinstance(s, CapturedStage))
    eager_steps = any(isinstance(s, Stage) for s in steps)
    return GraphEntry(key=key, steps=steps, warmup_ms=warmup_ms, capture_ms=capture_ms, bias_act=bias_act,
                      eager_bias_act=bias_act and eager_steps), out


def _replay_entry(entry: GraphEntry, x: Tensor, amp_dtype: torch.dtype | None, *, host: bool = False) -> Any:
    """Copy in, replay each captured stage (eager stages in between), copy out. Caller holds the lock.

    ``host``: the outputs are copied straight from graph memory into fresh pinned host tensors,
    asynchronously on the current stream: the caller synchronises that stream (outside the lock)
    before reading them, instead of the outputs being cloned on the device.

    An entry of one captured stage with one input tensor (the common case) takes a short path:
    its key already fixed the input's shape, dtype and device, so the checks and tree walks that
    a chain with eager stages between captured ones needs are skipped (tens of microseconds of a
    batch-1 call on a slow host)."""
    plain = entry.plain()
    if plain:
        static_in, stage, out_leaves, out_spec = plain
        with torch.inference_mode():
            if x.data_ptr() != static_in.data_ptr():
                static_in.copy_(x)
            stage.replay()
            if host:
                return unflatten(out_spec, [torch.empty(t.shape, dtype=t.dtype, pin_memory=True).copy_(
                    t, non_blocking=True) for t in out_leaves])
            return unflatten(out_spec, [t.clone() for t in out_leaves])
    eager_act = graph_bias_act(True) if entry.eager_bias_act else nullcontext()
    with torch.inference_mode(), autocast(x.device, amp_dtype), eager_act:
        val: Any = x
        for step in entry.steps:
            if isinstance(step, Stage):
                val = step.fn(val)
                continue
            leaves, spec = flatten(val)
            if spec != step.in_spec or len(leaves) != len(step.static_in):
                raise GraphCaptureError(
                    f"stage {step.name!r} got an input structured differently from the captured one; "
                    "the eager stage before it is not shape-stable, so this seam cannot be captured"
                )
            for src, dst in zip(leaves, step.static_in, strict=False):
                if src.shape != dst.shape or src.dtype != dst.dtype or src.device != dst.device:
                    raise GraphCaptureError(
                        f"stage {step.name!r} got {tuple(src.shape)} {src.dtype} on {src.device}, captured "
                        f"for {tuple(dst.shape)} {dst.dtype} on {dst.device}; the eager stage before it "
                        "produces data-dependent shapes, so it cannot be followed by a captured stage"
                    )
                if src.data_ptr() != dst.data_ptr():
                    dst.copy_(src)
            step.replay()
            val = step.static_out
        out_leaves, out_spec = flatten(val)
        if host:
            return unflatten(out_spec, [torch.empty(t.shape, dtype=t.dtype, pin_memory=True).copy_(t, non_blocking=True)
                                        for t in out_leaves])
        return unflatten(out_spec, [t.clone() for t in out_leaves])


# =========================================================================== the runner
class PredictGraphs:
    """The CUDA graphs of one model for prediction.

    Args:
        model: the owning :class:`~libreyolo.models._base.family.Family` (held weakly).
        force: capture even if the family has not opted in (``SUPPORTS_CUDA_GRAPH = False``).
            Internal: the parity harness uses it to produce the evidence the flag is set from.
        capacity: most graphs kept (LRU); default ``LIBREYOLO_GRAPH_CACHE_SIZE`` (8).

    Example:
        >>> model.graphs.run(x, policy=True, amp_dtype=torch.float16)  # doctest: +SKIP
    """

    def __init__(self, model: Family, *, force: bool = False, capacity: int | None = None,
                 warmup: int = WARMUP_ITERS, chunks: int | None = None) -> None:
        model = getattr(model, "family", model)  # a Model or backend: its family owns the network
        self._model_ref = weakref.ref(model)
        self._cls = type(model)
        self.force = bool(force)
        self.warmup = int(warmup)
        n = getattr(model, "GRAPH_CHUNKS", 1) if chunks is None else chunks
        if isinstance(n, bool) or not isinstance(n, int) or n < 1:
            raise ConfigError(f"the number of graphs per captured stage must be a positive int, got {n!r}")
        self.chunks = n
        cap = capacity if capacity is not None else env.get_int("LIBREYOLO_GRAPH_CACHE_SIZE")
        self._book: GraphBook[GraphEntry] = GraphBook(capacity=cap)
        self._lock = threading.Lock()
        self._pools: dict[str, Any] = {}
        self._streams: dict[str, Any] = {}
        self._eager_reason: str | None = None
        self._last_stream: Any = None  # stream of the last replay: the next one on another stream waits for it
        self._invalidations: list[dict[str, Any]] = []
        self._n_invalidations = 0
        self._keys: dict[tuple[Any, ...], GraphKey] = {}

    # ------------------------------------------------------------------ public
    @property
    def capacity(self) -> int:
        return self._book.capacity

    def __len__(self) -> int:
        return len(self._book.entries)

    def run(self, x: Tensor, *, policy: Any, amp_dtype: torch.dtype | None = None,
            decoded: bool = False, prologue: Any = None, host: bool = False) -> Any:
        """The network on ``x`` (Tensor[B, 3, H, W]) per ``policy``: replay, capture, or eager.

        Returns the same structure and bits as ``model.eager_forward(x, amp_dtype=amp_dtype)``
        (with ``decoded``: as ``model.eager_forward(x, decoded=True)``, the network followed by the
        family's decode in one graph); returned tensors are the caller's (copied out of graph memory).
        ``prologue``: a hashable function applied to ``x`` first, captured in the same graph (the
        pixel normalisation of :class:`~libreyolo.tasks.detect.preprocess.Normalize`): the result
        is ``model.eager_forward(prologue(x), ...)``'s. ``host``: a replay returns its outputs as
        host tensors, copied once from graph memory (a capture or an eager run returns device
        tensors as usual).
        """
        model = self._model()
        if not isinstance(x, Tensor):
            raise ConfigError(f"the network input must be a torch.Tensor, got {type(x).__name__}")
        reason = self._refusal(policy, x.device)
        if reason is not None:
            with self._lock:
                self._book.stats["calls"] += 1
                self._book.stats["eager_runs"] += 1
                self._eager_reason = reason
            return model.eager_forward(prologue(x) if prologue is not None else x, amp_dtype=amp_dtype,
                                       decoded=decoded)
        raw_key = (x.shape, x.dtype, x.device, amp_dtype, decoded, prologue)
        key = self._keys.get(raw_key)
        if key is None:  # a GraphKey per input kind, built once (its fields are strings)
            key = GraphKey.of(x, amp_dtype, decoded=decoded, prologue=prologue)
            if len(self._keys) >= 64:
                self._keys.clear()
            self._keys[raw_key] = key
        with self._lock:
            self._check_model(model, x)
            decision = self._book.decide(key, policy=policy)
            if decision == "replay":
                entry = self._book.entries[key]
                stream = self._order_streams(x.device)
                out = _replay_entry(entry, x, amp_dtype, host=host)
                entry.replays += 1
                self._book.stats["replays"] += 1
                self._eager_reason = None
            elif decision == "capture":
                self._order_streams(x.device)
                entry, out = self._capture_locked(model, x, key, amp_dtype, prologue=prologue)
                entry.replays += 1
                self._book.stats["replays"] += 1
                self._eager_reason = None
                return out
            else:
                self._book.stats["eager_runs"] += 1
                self._eager_reason = (f"cuda_graph='auto': input {list(key.shape)} {key.dtype} seen once; "
                                      "it is captured when the same shape repeats")
        if decision == "replay":
            if host:  # the copies were queued under the lock, last on this stream; wait outside it
                stream.synchronize()
            return out
        return model.eager_forward(prologue(x) if prologue is not None else x, amp_dtype=amp_dtype, decoded=decoded)

    def capture(self, shape: tuple[int, ...], *, amp_dtype: torch.dtype | None = None,
                input_dtype: torch.dtype = torch.float32, decoded: bool = False,
                memory_format: torch.memory_format = torch.contiguous_format) -> dict[str, Any]:
        """Capture the graph for ``shape`` now (a no-op if present); returns its :meth:`info` row."""
        model = self._model()
        device = model.device
        self._refusal(True, device)
        x = torch.full(tuple(shape), 0.5, dtype=input_dtype, device=device).contiguous(memory_format=memory_format)
        key = GraphKey.of(x, amp_dtype, decoded=decoded)
        with self._lock:
            self._check_model(model, x)
            entry = self._book.get(key)
            if entry is None:
                self._order_streams(x.device)
                entry, _ = self._capture_locked(model, x, key, amp_dtype)
            else:
                self._book.entries.move_to_end(key)
            return entry.info()

    def invalidate(self, reason: str) -> None:
        """Drop every graph and the memory pool (parameters moved); the reason shows in :meth:`info`."""
        with self._lock:
            self._invalidate_locked(reason)

    def release(self) -> None:
        """Free every graph and its pool (``release_graphs()``)."""
        with self._lock:
            n = len(self._book.drop_all())
            self._pools.clear()
            self._last_stream = None
        if n and torch.cuda.is_available() and torch.cuda.is_initialized():
            torch.cuda.empty_cache()
        logger.debug("released %d CUDA graph(s)", n)

    def info(self) -> dict[str, Any]:
        """JSON-able report: policy counters, one row per graph (LRU order), eager reason, invalidations."""
        with self._lock:
            return {
                "family": self._cls.FAMILY,
                "supports_cuda_graph": bool(self._cls.SUPPORTS_CUDA_GRAPH),
                "forced": self.force,
                "chunks": self.chunks,
                "capacity": self._book.capacity,
                "policy": dict(self._book.stats),
                "graphs": [e.info() for e in self._book.entries.values()],
                "eager_reason": self._eager_reason,
                "invalidation_count": self._n_invalidations,
                "invalidations": [dict(i) for i in self._invalidations],
            }

    # ------------------------------------------------------------------ internals
    def _model(self) -> Family:
        model = self._model_ref()
        if model is None:
            raise GraphCaptureError("the model that owned these CUDA graphs no longer exists")
        return model

    def _refusal(self, policy: Any, device: torch.device) -> str | None:
        supported, reason = bool(self._cls.SUPPORTS_CUDA_GRAPH), self._cls.CUDA_GRAPH_REASON
        if supported and not self.force:  # the flag covers the default architecture; a variant may not
            variant = self._model().cuda_graph_refusal()
            if variant is not None:
                supported, reason = False, variant
        elif not supported and not self.force and self._model().cuda_graph_variant():
            supported = True  # a variant with its own passing rows (CUDA_GRAPH_VARIANTS)
        return graph_refusal(family=self._cls.FAMILY, supported=supported, reason=reason, policy=policy,
                             device=device, force=self.force)

    def _check_model(self, model: Family, x: Tensor) -> None:
        """Refuse a device mismatch; drop graphs whose parameters were relocated behind our back."""
        mdev = model.device
        if mdev != x.device:
            raise ConfigError(f"the input is on {x.device} but the model is on {mdev}; "
                              "move one of them (model.to(...) or predict(device=...))")
        first = next(iter(self._book.entries.values()), None)  # all entries share the parameters
        if first is not None and _sentinel_stale(first.sentinel, model.net):
            self._invalidate_locked("parameters were relocated (model.net replaced or its parameters "
                                    "reassigned) without going through Family.to/fuse/quantize")

    def _order_streams(self, device: torch.device) -> Any:
        """Replays share static buffers and one pool: the lock orders their launches, and this orders
        their execution when callers launch from different streams. Returns the current stream."""
        cur = torch.cuda.current_stream(device)
        last = self._last_stream
        if last is not None and last is not cur and last != cur and last.device == cur.device:
            cur.wait_stream(last)
        self._last_stream = cur
        return cur

    def _invalidate_locked(self, reason: str) -> None:
        n = len(self._book.drop_all())
        self._pools.clear()
        self._last_stream = None
        self._n_invalidations += 1
        self._invalidations.append({"reason": reason, "graphs_dropped": n})
        del self._invalidations[:-KEEP_INVALIDATIONS]
        logger.debug("CUDA graphs invalidated (%d dropped): %s", n, reason)

    def _capture_locked(self, model: Family, x: Tensor, key: GraphKey,
                        amp_dtype: torch.dtype | None, prologue: Any = None) -> tuple[GraphEntry, Any]:
        dev = str(x.device)
        if dev not in self._pools:
            with torch.cuda.device(x.device):
                self._pools[dev] = torch.cuda.graph_pool_handle()
        if dev not in self._streams:
            self._streams[dev] = torch.cuda.Stream(device=x.device)
        stages = with_prologue(model.predict_stages() if key.head == "decoded" else model.forward_stages(), prologue)
        if not any(s.capturable for s in stages):
            raise GraphCaptureError(f"{model.FAMILY} declares no capturable stage; predict with cuda_graph=False")
        caller_stream = torch.cuda.current_stream(x.device) if x.is_cuda else None
        # chunks cut one capturable stage at the network's top-level modules; a seamed chain (several
        # capturable stages, each its own graph already) is captured as it is
        one_stage = sum(1 for s in stages if s.capturable) == 1
        chunker = _Chunker(model.net, self.chunks) if self.chunks > 1 and self.warmup > 0 and one_stage else None
        try:
            entry, out = _capture_entry(stages, x, key, amp_dtype=amp_dtype, pool=self._pools[dev],
                                        stream=self._streams[dev], warmup=self.warmup,
                                        bias_act=uses_graph_bias_act(model), chunker=chunker)
        except RuntimeError as e:
            self._pools.pop(dev, None)  # a failed capture may leave the pool half-used
            recover_after_failed_capture(x.device, stream=caller_stream)
            raise GraphCaptureError(
                f"capturing {model.FAMILY}-{model.size} for input {list(key.shape)} {key.dtype} failed: "
                f"{type(e).__name__}: {str(e).splitlines()[0] if str(e) else ''}. Its forward does something "
                "a CUDA graph cannot hold (host sync, data-dependent shape); predict with cuda_graph=False"
            ) from e
        finally:
            if chunker is not None:
                chunker.close()  # the hooks existed for warm-up and capture only
        entry.sentinel = _param_sentinel(model.net)
        self._book.store(key, entry)
        logger.debug("captured CUDA graph %s in %.1f ms (warm-up %.1f ms)", key, entry.capture_ms,
                     entry.warmup_ms)
        return entry, out
