"""Training-capture set-up for the loop (SPEC G-9, T-4): what a ``cuda_graph=True`` run captures.

The loop's ``graph_capture`` is None unless ``cuda_graph=True`` and
``libreyolo.graphs.training.unsupported_reason`` finds nothing against it (family flag
``SUPPORTS_TRAIN_CUDA_GRAPH``, CUDA device, no DDP); then it is a
``libreyolo.graphs.training.TrainGraphs`` holding the family's capturable training trunk when it
is split at a seam, else the whole network. The loop (:mod:`libreyolo.training.trainer`) needs
from it ``forward(imgs) -> preds`` (outputs whose backward runs the captured backward),
optionally ``maybe_capture(imgs)`` (called first), and ``zero_grad(optimizer)`` (in-place zeroing
while a graph is live, SPEC T-7). A :class:`~libreyolo.errors.GraphCaptureError` escaping a hook
turns capture off for the rest of the run with one warning (SPEC T-4); the optimiser step,
clipping, EMA and schedule stay eager.
"""

from __future__ import annotations

import logging
from typing import Any

import torch
from torch import nn

logger = logging.getLogger(__name__)


def build_train_capture(model: Any, *, net: nn.Module, device: torch.device, amp_dtype: torch.dtype | None,
                        distributed: bool) -> tuple[Any, Any]:
    """(capture the loop replays or None, report for the run's result or None).

    The capture is a ``libreyolo.graphs.training.TrainGraphs`` when capture is enabled; the
    report is that same object, also kept after a fallback to eager so the result says what
    happened. Without the graphs module both are None (one warning).
    """
    try:
        from ..graphs.training import TrainGraphs, unsupported_reason
    except ImportError as e:
        logger.warning("training eager: cuda_graph=True ignored because training capture is unavailable (%s)", e)
        return None, None
    reason = unsupported_reason(model, device=device, distributed=distributed)
    if distributed and reason is not None and "distributed" not in reason:
        reason = f"distributed training (DDP) is not captured (also: {reason})"
    # A family split at a seam (SPEC G-9) names its capturable training trunk; the rest of its
    # forward (e.g. a denoising decoder) runs inside its criterion, eager.
    stages = model.train_stages()
    target = stages[0].fn if stages and stages[0].capturable else net
    capture = TrainGraphs(target, requested=True, amp_dtype=amp_dtype, reason=reason)  # logs one line
    return (capture if capture.enabled else None), capture
