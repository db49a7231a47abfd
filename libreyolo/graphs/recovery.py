"""Keeping the process healthy around CUDA-graph captures (SPEC G-7, T-4).

Two hazards of capturing inside a long-running process, and what this module does about them:

* **Python's garbage collector during a capture.** A cyclic collection that runs while a stream
  is capturing may free an older ``CUDAGraph`` (its destructor calls ``cudaGraphExecDestroy``) or
  a tensor that still has a pending event, which invalidates the capture in progress ("operation
  not permitted when stream is capturing"). :func:`no_gc` collects once before a capture and
  keeps the collector off until it ends.
* **The CUDA random-number generator after a failed capture.** ``CUDAGraph.capture_begin`` puts
  the device's default generator into capture mode; only a successful ``capture_end`` takes it
  out. When the capture fails (invalidated stream, an op that syncs) the generator stays in
  capture mode, and the next random op *outside* any capture raises "Offset increment outside
  graph capture encountered unexpectedly" — e.g. dropout in the eager step that was supposed to
  carry the run on. :func:`recover_after_failed_capture` gives the generator a fresh state object
  with the same seed and offset, so the random stream continues exactly where it was.

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
    """Collect once, then keep Python's cyclic garbage collector off for the block.

    Restores the collector's previous state (on or off) even when the block raises.
    """
    was_enabled = gc.isenabled()
    gc.collect()
    gc.disable()
    try:
        yield
    finally:
        if was_enabled:
            gc.enable()


def reset_generator_capture_state(device: torch.device | int | str) -> bool:
    """Replace the default CUDA generator state of ``device`` by a copy that is not capturing.

    The copy keeps the seed and the Philox offset, so later random numbers are the ones the
    process would have drawn had the failed capture never started. Returns ``False`` (and does
    nothing) when CUDA is unavailable, the current stream is still capturing, or this torch has
    no graph-safe generator state API.
    """
    if not torch.cuda.is_available():
        return False
    dev = torch.device(device) if not isinstance(device, torch.device) else device
    if dev.type != "cuda":
        return False
    index = dev.index if dev.index is not None else torch.cuda.current_device()
    gen = torch.cuda.default_generators[index]
    if not (hasattr(gen, "clone_state") and hasattr(gen, "graphsafe_set_state")):
        return False
    with torch.cuda.device(index):
        if torch.cuda.is_current_stream_capturing():
            return False
        gen.graphsafe_set_state(gen.clone_state())
    return True


def recover_after_failed_capture(device: torch.device | int | str) -> None:
    """Make eager CUDA work possible again after a capture raised (see the module docstring).

    Waits for the device (surfacing nothing: errors of the failed capture were already raised),
    then resets the generator's capture state. Safe to call when nothing went wrong.
    """
    dev = torch.device(device) if not isinstance(device, torch.device) else device
    if dev.type != "cuda" or not torch.cuda.is_available():
        return
    try:
        torch.cuda.synchronize(dev)
    except RuntimeError as e:  # a sticky error would surface on the next call anyway: say so now
        logger.warning("device %s reported an error after a failed CUDA-graph capture: %s", dev, e)
    if not reset_generator_capture_state(dev):
        logger.debug("CUDA generator state of %s left as it is (no graph-safe state API or still capturing)", dev)
