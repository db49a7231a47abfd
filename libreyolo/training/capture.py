"""Training capture for the loop (SPEC G-9, T-4): what a ``cuda_graph=True`` run captures, and
the forward / zero-grad seam the loop calls (:class:`StepCapture`).

:attr:`StepCapture.graphs` is None unless ``cuda_graph=True`` and
``libreyolo.graphs.training.unsupported_reason`` finds nothing against it (family flag
``SUPPORTS_TRAIN_CUDA_GRAPH``, CUDA device, no SyncBatchNorm under DDP); then it is a
``libreyolo.graphs.training.TrainGraphs`` holding the family's capturable training trunk when it
is split at a seam, else the whole network. The loop (:mod:`libreyolo.training.trainer`) needs
from it ``forward(imgs) -> preds`` (outputs whose backward runs the captured backward),
optionally ``maybe_capture(imgs)`` (called first), and ``zero_grad(optimizer)`` (in-place zeroing
while a graph is live, SPEC T-7). A :class:`~libreyolo.errors.GraphCaptureError` escaping a hook
turns capture off for the rest of the run with one warning (SPEC T-4); the optimiser step,
clipping, EMA and schedule stay eager. With ``multi_scale`` the run trains at ``sizes`` fixed
input sizes (:mod:`.scales`); the cap on captured graphs follows them (:func:`.scales.graph_cap`),
so each size is captured once.

Under DDP the capture holds the local network, not the DDP wrapper: every batch that goes through
:attr:`StepCapture.graphs` (replayed, or eager before its shape is captured) bypasses DDP's
gradient hooks, :attr:`StepCapture.bypassed` says so, and the trainer all-reduces the gradients
itself on the micro-batch that steps the optimiser. Once bypassing, a distributed run keeps
bypassing even after a capture failure (the fallback runs the bare network eager): every rank then
takes the same collective path, whichever rank failed.
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from typing import Any

import torch
from torch import Tensor, nn

from ..errors import GraphCaptureError

logger = logging.getLogger(__name__)


def build_train_capture(model: Any, *, net: nn.Module, device: torch.device, amp_dtype: torch.dtype | None,
                        distributed: bool, sizes: int = 1) -> tuple[Any, Any]:
    """(capture the loop replays or None, report for the run's result or None).

    The capture is a ``libreyolo.graphs.training.TrainGraphs`` when capture is enabled; the
    report is that same object, also kept after a fallback to eager so the result says what
    happened. Without the graphs module both are None (one warning).
    """
    try:
        from ..graphs.training import MAX_TRAIN_GRAPHS, TrainGraphs, unsupported_reason
    except ImportError as e:
        logger.warning("training eager: cuda_graph=True ignored because training capture is unavailable (%s)", e)
        return None, None
    reason = unsupported_reason(model, device=device, distributed=distributed, net=net)
    # A family split at a seam (SPEC G-9) names its capturable training trunk; the rest of its
    # forward (e.g. a denoising decoder) runs inside its criterion, eager.
    stages = model.train_stages()
    target = stages[0].fn if stages and stages[0].capturable else net
    cap: dict[str, int] = {}
    if sizes > 1:  # multi_scale: one graph per size (plus the partial last batch)
        from .scales import graph_cap

        cap["max_graphs"] = graph_cap(sizes, MAX_TRAIN_GRAPHS)
    capture = TrainGraphs(target, requested=True, amp_dtype=amp_dtype, reason=reason, **cap)  # logs one line
    return (capture if capture.enabled else None), capture


class StepCapture:
    """The training step's forward and gradient zeroing, captured or eager: the capture policy and
    its fallback, owned in one place.

    Constructed with the eager forward (``eager(imgs) -> preds``: the network under autocast);
    :meth:`enable` builds the training capture (:func:`build_train_capture`) when ``cuda_graph=True``.
    State: :attr:`graphs`, the live capture the loop replays (None: eager), and :attr:`report`, the
    capture object kept for the run's result (also after a fallback: it says what happened).
    """

    def __init__(self, eager: Callable[[Tensor], Any]) -> None:
        self.eager = eager
        self.graphs: Any = None
        self.report: Any = None
        self.bypassed = False  # the last forward ran on the bare network, not through the DDP wrapper
        self._bare: Callable[[Tensor], Any] | None = None  # distributed: the fallback that keeps bypassing

    def enable(self, model: Any, *, net: nn.Module, device: torch.device, amp_dtype: torch.dtype | None,
               distributed: bool, sizes: int = 1) -> None:
        """Set up capture of ``model``'s training trunk (or all of ``net``) for a ``cuda_graph=True`` run
        training at ``sizes`` input sizes (``multi_scale`` buckets; 1 otherwise)."""
        capture, report = build_train_capture(model, net=net, device=device, amp_dtype=amp_dtype,
                                              distributed=distributed, sizes=sizes)
        if report is not None:
            self.graphs = capture
            self.report = report
        if distributed and capture is not None:
            from ..graphs.training import _AutocastForward

            self._bare = _AutocastForward(net, amp_dtype)

    def forward(self, imgs: Tensor) -> Any:
        """``graphs.forward(imgs)`` (after ``graphs.maybe_capture(imgs)``) while a capture is live, else
        ``eager(imgs)``. A :class:`~libreyolo.errors.GraphCaptureError` turns capture off for the
        rest of the run with one warning (SPEC T-4) and this batch runs eager."""
        gc = self.graphs
        if gc is not None:
            try:
                if hasattr(gc, "maybe_capture"):
                    gc.maybe_capture(imgs)
                out = gc.forward(imgs)
                self.bypassed = self._bare is not None
                return out
            except GraphCaptureError as e:
                logger.warning("training eager from now on: graph capture failed: %s", e)
                self.graphs = None
        if self._bare is not None:  # distributed and bypassing: stay on the bare network (class doc)
            self.bypassed = True
            return self._bare(imgs)
        self.bypassed = False
        return self.eager(imgs)

    def zero_grad(self, optimizer: torch.optim.Optimizer) -> None:
        """Zero gradients; a live training graph needs it done in place (SPEC T-7)."""
        gc = self.graphs
        if gc is not None and hasattr(gc, "zero_grad"):
            gc.zero_grad(optimizer)
        else:
            optimizer.zero_grad(set_to_none=True)
