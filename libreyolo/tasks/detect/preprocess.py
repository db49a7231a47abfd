"""Detection preprocessing on the model's device: one uint8 upload per batch of same-shaped
images (through a pinned buffer on CUDA), then resize, pad and normalise there; single images
are letterboxed to the smallest stride-multiple rectangle (``rect=True``)."""

from __future__ import annotations

import threading
import warnings
from typing import Any

import numpy as np
import torch
from torch import Tensor

from ...ops.letterbox import LetterboxParams, letterbox, letterbox_batch, letterbox_shape


class Staging:
    """Pinned host buffers for the uint8 upload, reused across calls (one per byte size).

    A buffer is rewritten only after the copy that last read it has finished (an event per
    buffer), so a reused buffer can never race an upload still in flight.
    """

    def __init__(self) -> None:
        self._bufs: dict[tuple[str, int], tuple[Tensor, Any]] = {}
        self._lock = threading.Lock()

    def upload(self, arr: np.ndarray, device: torch.device) -> Tensor:
        """arr (np.ndarray, uint8, C-contiguous) -> the same tensor on ``device``."""
        if arr.flags.writeable:
            src = torch.from_numpy(arr)
        else:  # read-only (e.g. np.asarray of a PIL image): never written here, so no copy
            with warnings.catch_warnings():
                warnings.simplefilter("ignore", UserWarning)
                src = torch.from_numpy(arr)
        if device.type != "cuda":
            return src
        key = (str(device), src.numel())
        with self._lock:  # one caller at a time per buffer: wait, fill, launch, record
            entry = self._bufs.get(key)
            if entry is None:
                if len(self._bufs) >= 4:
                    self._bufs.pop(next(iter(self._bufs)))
                with torch.cuda.device(device):
                    entry = (torch.empty(key[1], dtype=torch.uint8, pin_memory=True), torch.cuda.Event())
                self._bufs[key] = entry
            buf, done = entry
            done.synchronize()
            host = buf.view(src.shape)
            np.copyto(host.numpy(), arr)  # a plain memcpy into the pinned buffer
            out = host.to(device, non_blocking=True)
            done.record(torch.cuda.current_stream(device))
        return out


_STAGING = Staging()


def preprocess(images: list[np.ndarray], imgsz: tuple[int, int], device: torch.device, *,
               dtype: torch.dtype = torch.float32, channels_last: bool = False, rect: bool = False,
               stride: int = 32, staging: Staging | None = None,
               bgr: bool = False) -> tuple[Tensor, list[LetterboxParams]]:
    """RGB uint8 HWC images -> (Tensor[B, 3, H, W] ``dtype`` in [0, 1] on ``device``, letterbox params).

    ``bgr``: the images are BGR; their channels are swapped on ``device`` (one small kernel there
    instead of a host-side conversion per image).

    ``(H, W)`` is ``imgsz``, or with ``rect`` the smallest stride-multiple rectangle holding the
    scaled image when every image of the batch has the same shape (:func:`letterbox_shape`).
    Same-shaped images go up as one uint8 upload (through a pinned buffer on CUDA) and are
    resized, padded and normalised on ``device`` in one batched pass; mixed shapes are letterboxed
    one by one.
    """
    shapes = [tuple(int(v) for v in im.shape[:2]) for im in images]
    out_shape = letterbox_shape(shapes, imgsz, stride=stride, rect=rect)
    fmt = torch.channels_last if channels_last else torch.contiguous_format
    if len(set(shapes)) == 1:
        arr = images[0][None] if len(images) == 1 else np.stack(images)  # (B, h, w, 3)
        t = (staging or _STAGING).upload(np.ascontiguousarray(arr), device).permute(0, 3, 1, 2)
        if bgr:
            t = t.flip(1)
        x, p = letterbox_batch(t, out_shape)
        params = [p] * len(images)
    else:
        boxed, params = [], []
        for im in images:
            t = torch.from_numpy(np.ascontiguousarray(im)).to(device, non_blocking=True).permute(2, 0, 1)
            if bgr:
                t = t.flip(0)
            b, p = letterbox(t, out_shape)
            boxed.append(b)
            params.append(p)
        x = torch.stack(boxed)
    return normalized(x, dtype=dtype, memory_format=fmt), params


def normalized(x: Tensor, *, dtype: torch.dtype, memory_format: torch.memory_format) -> Tensor:
    """``x`` (0..255 values, uint8 or float) / 255 as ``dtype`` in ``memory_format``: one kernel.

    The quotient is formed in float32 and rounded once to ``dtype``, which is what casting first
    and dividing in ``dtype`` computes too (0..255 are exact in every float type, and a half
    division runs in float32): the same bits as ``x.to(dtype, memory_format=...).div_(255.0)``
    (tests/unit/engine/test_host_path.py, CPU), one launch fewer per batch. ATen's CUDA division
    by a host scalar multiplies by its float32 reciprocal in both forms; the CUDA test
    (tests/gpu/test_graphs_predict.py) was written in session S but has not run yet (its file
    timed out first). Eager and graph prediction share this preprocessing, so graph parity is
    unaffected either way.
    """
    out = torch.empty(x.shape, dtype=dtype, device=x.device, memory_format=memory_format)
    return torch.div(x, 255.0, out=out)
