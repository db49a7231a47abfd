"""CUDA-graph capture of the training forward + backward (SPEC T-1..T-7).

Only the network's forward and backward are captured (through
``torch.cuda.make_graphed_callables``); the loss and target assignment, optimizer step,
gradient clipping, EMA, LR schedule, gradient accumulation and GradScaler stay eager (T-2).

Rules this module enforces:

* ``cuda_graph=True`` is always safe to pass (T-1). A family without training capture, a CPU
  device, a distillation run or SyncBatchNorm under DDP writes one log line and trains eager,
  unchanged (T-4).
* Under DDP the graphs hold the local network only (SPEC A-6, second option: "capture the network
  sections before wrapping in DDP so the all-reduces stay outside the graphs"): the loop's forward
  bypasses the DDP wrapper and the trainer all-reduces the gradients itself, eagerly, on the
  micro-batch that steps the optimiser (``Distributed.reduce_gradients``). No collective is ever
  inside a graph, so NCCL's capture rules (async error handling, side-stream construction) do not
  apply.
* A shape is captured only after it has been seen :data:`REPEATS_BEFORE_CAPTURE` times (T-3);
  other shapes (the last partial batch, multi-scale sizes) run eager.
* A capture or replay failure logs one warning and leaves the rest of the run eager (T-4).
* Capture runs in ``"thread_local"`` mode: ``make_graphed_callables`` does not expose the mode
  on every supported torch, so ``torch.cuda.CUDAGraph`` is replaced for the duration of the
  capture by a subclass forcing it, under a lock, restored even on exceptions (T-5).
* Warm-up iterations run real forwards, which would move BatchNorm running statistics: every
  buffer is snapshotted before and restored after (T-6). They also draw random numbers (dropout,
  stochastic depth): the device's RNG state is saved before and restored after, so the first
  replay draws the masks the eager step would have drawn and a captured run follows the eager
  run's random stream.
* The graphed backward hands out its static gradient buffers; if ``param.grad`` were ``None``
  autograd could adopt such a buffer as ``.grad`` and the next replay would overwrite it,
  doubling the last micro-batch under accumulation (T-7). While a graph is live, gradients must
  therefore be zeroed in place: call :meth:`TrainGraphs.zero_grad`, which does that.

Each captured shape gets a thin wrapper module around the network (sharing its parameters), so
the network's own ``forward`` is never patched and releasing a graph is dropping the wrapper.
"""

from __future__ import annotations

import contextlib
import logging
import threading
import time
from collections import Counter
from dataclasses import dataclass
from typing import Any

import torch
from torch import Tensor, nn

from ..device import autocast
from .recovery import no_gc, recover_after_failed_capture

logger = logging.getLogger(__name__)

REPEATS_BEFORE_CAPTURE = 3
MAX_TRAIN_GRAPHS = 2
WARMUP_ITERS = 3

_substitution_lock = threading.Lock()


def _takes_capture_mode() -> bool:
    import inspect

    try:
        return "capture_error_mode" in inspect.signature(torch.cuda.make_graphed_callables).parameters
    except (TypeError, ValueError):
        return False


# Where torch exposes the mode, it is also passed explicitly (belt and braces with the substitution).
_MGC_TAKES_MODE = _takes_capture_mode()


class _ThreadLocalCUDAGraph(torch.cuda.CUDAGraph):
    """A CUDAGraph whose capture always uses ``capture_error_mode="thread_local"``."""

    def capture_begin(self, pool: Any = None, capture_error_mode: str = "global") -> None:  # type: ignore[override]
        super().capture_begin(pool=pool, capture_error_mode="thread_local")


@contextlib.contextmanager
def thread_local_capture() -> Any:
    """Make every ``torch.cuda.CUDAGraph()`` created inside capture in thread-local mode.

    Holds a process-wide lock so two concurrent captures cannot leave the substitution behind.
    """
    import torch.cuda.graphs as graphs_module

    # ``make_graphed_callables`` builds its graphs as ``torch.cuda.CUDAGraph()`` on some torch
    # versions and through the name in its own module on others: replace both.
    namespaces = (torch.cuda, graphs_module)
    with _substitution_lock:
        originals = [ns.CUDAGraph for ns in namespaces]
        try:
            for ns in namespaces:
                ns.CUDAGraph = _ThreadLocalCUDAGraph  # type: ignore[misc]
            yield
        finally:
            for ns, original in zip(namespaces, originals, strict=True):
                ns.CUDAGraph = original  # type: ignore[misc]


class _AutocastForward(nn.Module):
    """Wraps the network so autocast (cache disabled) is part of the captured region."""

    def __init__(self, net: nn.Module, amp_dtype: torch.dtype | None) -> None:
        super().__init__()
        self.net = net
        self.amp_dtype = amp_dtype

    def forward(self, x: Tensor) -> Any:
        if self.amp_dtype is None:
            return self.net(x)
        with autocast("cuda", self.amp_dtype):
            return self.net(x)


@dataclass
class _TrainGraph:
    wrapper: nn.Module
    capture_ms: float
    replays: int = 0


def snapshot_buffers(module: nn.Module) -> dict[str, Tensor]:
    return {k: b.detach().clone() for k, b in module.named_buffers()}


def restore_buffers(module: nn.Module, snap: dict[str, Tensor]) -> None:
    with torch.no_grad():
        for k, b in module.named_buffers():
            b.copy_(snap[k])


def snapshot_rng(device: torch.device) -> Tensor | None:
    """The CUDA RNG state of ``device`` (None off CUDA): restored after a capture's warm-ups."""
    return torch.cuda.get_rng_state(device) if device.type == "cuda" else None


def restore_rng(device: torch.device, state: Tensor | None) -> None:
    if state is not None:
        torch.cuda.set_rng_state(state, device)


def dry_run() -> bool:
    """``LIBREYOLO_TRAIN_CAPTURE_DRYRUN=1``: a run without CUDA takes the capture code path but never
    captures (:class:`TrainGraphs` then runs every batch eager on the bare network), so the policy
    and the DDP gradient reduction around it can be tested on a CPU."""
    from ..env import get_flag

    return get_flag("LIBREYOLO_TRAIN_CAPTURE_DRYRUN")


def unsupported_reason(model: Any, *, device: torch.device, distributed: bool, distill: bool = False,
                       net: nn.Module | None = None) -> str | None:
    """Why training capture cannot be used for this model/configuration, or None.

    A distributed run is captured (the graphs hold the local network; gradients are all-reduced
    outside them), except with SyncBatchNorm, whose forward all-reduces batch statistics: that
    collective would have to sit inside the graph.
    """
    fam = type(getattr(model, "family", model))  # a Model: its family declares the capability
    if not getattr(fam, "SUPPORTS_TRAIN_CUDA_GRAPH", False):
        return f"family {fam.FAMILY!r} has no verified training capture ({fam.TRAIN_CUDA_GRAPH_REASON})"
    if device.type != "cuda" and not dry_run():
        return f"device is {device.type}, CUDA graphs need a CUDA device"
    if distill:
        return "distillation runs are not captured"
    if distributed and net is not None and any(isinstance(m, nn.SyncBatchNorm) for m in net.modules()):
        return ("SyncBatchNorm (sync_bn=True) all-reduces inside the forward, and a training graph does not "
                "hold collectives; use sync_bn=False to capture")
    return None


class TrainGraphs:
    """Forward for the training loop, replaying captured graphs where it may.

    Example (inside a training loop)::

        graphs = TrainGraphs(model.net, requested=True, amp_dtype=torch.float16, reason=None)
        preds = graphs.forward(imgs)          # eager until the shape repeated 3 times
        loss, items = criterion(preds, batch)
        scaler.scale(loss).backward()
        ...
        graphs.zero_grad(optimizer)
    """

    def __init__(
        self,
        net: nn.Module,
        *,
        requested: bool,
        amp_dtype: torch.dtype | None,
        reason: str | None,
        repeats: int = REPEATS_BEFORE_CAPTURE,
        max_graphs: int = MAX_TRAIN_GRAPHS,
    ) -> None:
        self.net = net
        self.amp_dtype = amp_dtype
        self.repeats = repeats
        self.max_graphs = max_graphs
        self.enabled = bool(requested) and reason is None
        self.reason = reason if requested else "cuda_graph=False"
        self.failed: str | None = None
        self._eager = _AutocastForward(net, amp_dtype)
        self._trainable: list[nn.Parameter] | None = None
        self._opt_params: tuple[torch.optim.Optimizer, list[nn.Parameter]] | None = None
        self._seen: Counter[tuple] = Counter()
        self._graphs: dict[tuple, _TrainGraph] = {}
        self.eager_steps = 0
        if requested and reason is not None:
            logger.info("training eager: %s", reason)  # exactly one line (T-4)

    @property
    def live(self) -> bool:
        return bool(self._graphs)

    def _key(self, x: Tensor) -> tuple:
        return (tuple(x.shape), x.dtype, x.device, self.amp_dtype, self.net.training)

    def forward(self, x: Tensor) -> Any:
        """Network outputs for the batch ``x`` (Tensor[B, 3, H, W] float on the net's device)."""
        if not self.enabled or not self.net.training:
            self.eager_steps += 1
            return self._eager(x)
        key = self._key(x)
        graph = self._graphs.get(key)
        if graph is None:
            self._seen[key] += 1
            if (self._seen[key] >= self.repeats and len(self._graphs) < self.max_graphs
                    and not (x.device.type != "cuda" and dry_run())):  # a dry run never captures
                graph = self._capture(key, x)
        if graph is None:
            self.eager_steps += 1
            return self._eager(x)
        try:
            out = graph.wrapper(x)
        except Exception as e:  # noqa: BLE001 - a failed optional speed-up must not end the run (T-4)
            self._fail(f"replay failed: {e!r}")
            return self._eager(x)
        graph.replays += 1
        return out

    __call__ = forward

    def _capture(self, key: tuple, x: Tensor) -> _TrainGraph | None:
        wrapper = _AutocastForward(self.net, self.amp_dtype)
        snap = snapshot_buffers(self.net)
        rng = snapshot_rng(x.device)
        caller_stream = torch.cuda.current_stream(x.device) if x.is_cuda else None
        t0 = time.perf_counter()
        try:
            self._ensure_grads()
            kwargs: dict[str, Any] = {"num_warmup_iters": WARMUP_ITERS}
            if _MGC_TAKES_MODE:
                kwargs["capture_error_mode"] = "thread_local"
            with thread_local_capture(), no_gc():
                torch.cuda.make_graphed_callables(wrapper, (x.detach().clone(),), **kwargs)
            torch.cuda.synchronize(x.device)
        except Exception as e:  # noqa: BLE001 - T-4: the run goes on eager
            recover_after_failed_capture(x.device, stream=caller_stream)
            restore_buffers(self.net, snap)
            restore_rng(x.device, rng)
            self._fail(f"capture failed: {e!r}")
            return None
        restore_buffers(self.net, snap)
        restore_rng(x.device, rng)
        ms = (time.perf_counter() - t0) * 1e3
        graph = _TrainGraph(wrapper=wrapper, capture_ms=ms)
        self._graphs[key] = graph
        logger.info("training capture: shape %s captured in %.0f ms", tuple(x.shape), ms)
        return graph

    def _ensure_grads(self) -> None:
        if self._trainable is None:  # listed once: a module walk per step costs milliseconds of Python
            self._trainable = [p for p in self.net.parameters() if p.requires_grad]
        for p in self._trainable:
            if p.grad is None:
                p.grad = torch.zeros_like(p)

    def zero_grad(self, optimizer: torch.optim.Optimizer) -> None:
        """Zero gradients; in place while a graph is live (see the module docstring, T-7)."""
        if self.live:  # one multi-tensor zero over the optimiser's gradients (listed once per optimiser)
            if self._opt_params is None or self._opt_params[0] is not optimizer:
                self._opt_params = (optimizer, [p for g in optimizer.param_groups for p in g["params"]])
            grads = [p.grad for p in self._opt_params[1] if p.grad is not None]
            if grads:
                torch._foreach_zero_(grads)
            self._ensure_grads()
        else:
            optimizer.zero_grad(set_to_none=True)

    def _fail(self, why: str) -> None:
        if self.failed is None:
            logger.warning("training CUDA graph disabled for the rest of this run: %s; continuing eager", why)
        self.failed = why
        self.enabled = False
        self._graphs.clear()

    def release(self) -> None:
        """Drop every training graph (the network's forward was never patched)."""
        self._graphs.clear()
        self._seen.clear()

    def info(self) -> dict[str, Any]:
        return {
            "enabled": self.enabled,
            "reason": self.reason,
            "failed": self.failed,
            "eager_steps": self.eager_steps,
            "graphs": [
                {"shape": list(k[0]), "amp_dtype": str(k[3]), "replays": g.replays, "capture_ms": round(g.capture_ms, 1)}
                for k, g in self._graphs.items()
            ],
        }
