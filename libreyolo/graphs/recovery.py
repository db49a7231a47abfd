"""Keeping the process healthy around CUDA-graph captures (SPEC G-7, T-4).

Two hazards of capturing inside a long-running process, and what this module does about them:

* **Python's garbage collector during a capture.** A cyclic collection that runs while a stream
  is capturing may free an older ``CUDAGraph`` (its destructor calls ``cudaGraphExecDestroy``) or
  a tensor that still has a pending event, which invalidates the capture in progress ("operation
  not permitted when stream is capturing"). :func:`no_gc` keeps the collector off until the
  capture ends (no collection first: a full ``gc.collect()`` per capture is expensive, and what
  it would free can just as well be freed after the capture).
* **The CUDA random-number generator after a failed capture.** On the torch releases whose
  generator keeps one graph-safe state object (2.11 among them), ``CUDAGraph.capture_begin`` puts
  that state into capture mode and only a successful ``capture_end`` takes it out. When the
  capture fails (invalidated stream, an op that syncs) the state stays in capture mode: the next
  random op *outside* any capture raises "Offset increment outside graph capture encountered
  unexpectedly" (e.g. dropout in the eager step that was supposed to carry the run on), and so
  does the next replay of any graph captured *earlier* (they hold the same state object).
  :func:`reset_generator_capture_state` repairs that state in place by one trivial, successful
  capture: its epilogue leaves capture mode, and seed and offset are untouched, so the random
  stream continues exactly where it was and earlier graphs keep working. Newer torch releases
  track capture state per capture and need no repair; the trivial capture is harmless there.
* **The current stream after a failed capture.** ``torch.cuda.graph`` enters its capture stream
  before ``capture_begin`` and leaves it only after a successful ``capture_end``; a failure can
  leave the thread on the capture stream. :func:`recover_after_failed_capture` restores the
  stream the caller was on.

Example::

    try:
        with no_gc():
            graph = capture(...)
    except RuntimeError:
        recover_after_failed_capture(device)   # then continue eager
"""

from __future__ import annotations

import contextlib
import gc
import logging
from collections.abc import Iterator

import torch

logger = logging.getLogger(__name__)


@contextlib.contextmanager
def no_gc() -> Iterator[None]:
    """Keep Python's cyclic garbage collector off for the block.

    Restores the collector's previous state (on or off) even when the block raises.
    """
    was_enabled = gc.isenabled()
    try:
        gc.disable()
        yield
    finally:
        if was_enabled:
            gc.enable()


def reset_generator_capture_state(device: torch.device | int | str) -> bool:
    """Take the default CUDA generator of ``device`` out of a capture mode left by a failed capture.

    Runs one trivial capture (a one-element fill on a side stream) so that the generator's state
    goes through a complete prologue / epilogue pair; seed and Philox offset do not change. If that
    capture itself fails, falls back to giving the generator a fresh copy of its state (same seed
    and offset; graphs captured earlier then keep the old state object). Returns ``False`` (and
    does nothing) when CUDA is unavailable or the current stream is still capturing.
    """
    if not torch.cuda.is_available():
        return False
    dev = torch.device(device) if not isinstance(device, torch.device) else device
    if dev.type != "cuda":
        return False
    index = dev.index if dev.index is not None else torch.cuda.current_device()
    with torch.cuda.device(index):
        if torch.cuda.is_current_stream_capturing():
            return False
        caller = torch.cuda.current_stream(index)
        scratch = torch.zeros(1, device=f"cuda:{index}")
        side = torch.cuda.Stream(device=index)
        side.wait_stream(caller)
        graph = torch.cuda.CUDAGraph()
        try:
            with torch.cuda.stream(side):
                graph.capture_begin(capture_error_mode="thread_local")
                try:
                    scratch.fill_(0.0)
                finally:
                    graph.capture_end()
            caller.wait_stream(side)
            return True
        except RuntimeError as e:
            torch.cuda.set_stream(caller)
            gen = torch.cuda.default_generators[index]
            if not (hasattr(gen, "clone_state") and hasattr(gen, "graphsafe_set_state")):
                logger.warning("could not repair the CUDA generator after a failed capture (%s)", e)
                return False
            gen.graphsafe_set_state(gen.clone_state())
            logger.debug("CUDA generator given a fresh state after a failed capture (%s)", e)
            return True
        finally:
            del graph


def recover_after_failed_capture(device: torch.device | int | str, *,
                                 stream: torch.cuda.Stream | None = None) -> None:
    """Make eager CUDA work possible again after a capture raised (see the module docstring).

    ``stream``: the stream the caller was on before the capture; it becomes current again. Then
    waits for the device (errors of the failed capture were already raised; a sticky one is
    logged) and repairs the generator's capture state. Safe to call when nothing went wrong.
    """
    dev = torch.device(device) if not isinstance(device, torch.device) else device
    if dev.type != "cuda" or not torch.cuda.is_available():
        return
    if stream is not None:
        torch.cuda.set_stream(stream)
    try:
        torch.cuda.synchronize(dev)
    except RuntimeError as e:  # a sticky error would surface on the next call anyway: say so now
        logger.warning("device %s reported an error after a failed CUDA-graph capture: %s", dev, e)
    if not reset_generator_capture_state(dev):
        logger.debug("CUDA generator state of %s left as it is (still capturing, or no way to repair it)", dev)
