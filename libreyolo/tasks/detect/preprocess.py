"""Detection preprocessing on the model's device: one uint8 upload per batch of same-shaped
images (through a pinned buffer on CUDA), then resize, pad and normalise there; single images
are letterboxed to the smallest stride-multiple rectangle (``rect=True``)."""

from __future__ import annotations

import threading
import warnings
from dataclasses import dataclass
from typing import Any

import numpy as np
import torch
from torch import Tensor

from ...ops.letterbox import LetterboxParams, letterbox, letterbox_batch, letterbox_shape


class Staging:
    """Pinned host buffers for the uint8 upload, reused across calls (one per device and shape).

    A buffer is rewritten only after the copy that last read it has finished (an event per
    buffer), so a reused buffer can never race an upload still in flight. Each buffer keeps its
    tensor and numpy views, so an upload is one memcpy into it, one device allocation and one
    asynchronous copy: on a slow host every torch call saved is tens of microseconds of a
    batch-1 call.
    """

    MAX_BUFFERS = 4

    def __init__(self) -> None:
        self._bufs: dict[tuple[torch.device, tuple[int, ...]], tuple[Tensor, np.ndarray, Any]] = {}
        self._lock = threading.Lock()

    def upload(self, arr: np.ndarray, device: torch.device) -> Tensor:
        """arr (np.ndarray, uint8, C-contiguous) -> the same tensor on ``device``."""
        if device.type != "cuda":
            if arr.flags.writeable:
                return torch.from_numpy(arr)
            with warnings.catch_warnings():  # read-only (np.asarray of a PIL image): never written here
                warnings.simplefilter("ignore", UserWarning)
                return torch.from_numpy(arr)
        key = (device, arr.shape)
        with self._lock:  # one caller at a time per buffer: wait, fill, launch, record
            entry = self._bufs.get(key)
            if entry is None:
                if len(self._bufs) >= self.MAX_BUFFERS:
                    self._bufs.pop(next(iter(self._bufs)))
                with torch.cuda.device(device):
                    buf = torch.empty(arr.shape, dtype=torch.uint8, pin_memory=True)
                    entry = (buf, buf.numpy(), torch.cuda.Event())
                self._bufs[key] = entry
            buf, view, done = entry
            done.synchronize()
            if arr.flags.writeable and threading.current_thread() is _MAIN:
                # torch's copy runs on the intra-op threads: 8.2 vs 33.8 us for a 640x480 photo on
                # the 16-core GPU host (benchmarks/predict_phases.py); only from the main thread, so
                # that predict calls in several threads do not each start a team of copy threads
                buf.copy_(torch.from_numpy(arr))
            else:  # other threads, and read-only arrays (not wrappable without a warning): one memcpy
                np.copyto(view, arr)
            out = torch.empty(arr.shape, dtype=torch.uint8, device=device)
            out.copy_(buf, non_blocking=True)
            done.record(torch.cuda.current_stream(device))
        return out


_STAGING = Staging()
_MAIN = threading.main_thread()


@dataclass(frozen=True)
class Normalize:
    """The last step of preprocessing as a function of the letterboxed pixels, so that it can run
    inside the prediction graph (its first kernels) instead of as separate launches before it:
    0..255 values (uint8, or float32 after a resize) -> ``dtype`` in [0, 1] in the network's
    layout, BGR channels swapped to RGB first when ``bgr``. The same kernels and bits as
    :func:`preprocess` (which ends with it); hashable, so a graph is keyed on it.

    Example:
        >>> f = Normalize(dtype=torch.float32, channels_last=False, bgr=True)
        >>> f(torch.tensor([[[[255]], [[0]], [[0]]]], dtype=torch.uint8)).flatten().tolist(), f.name
        ([0.0, 0.0, 1.0], 'u8/255:float32:nchw:bgr')
    """

    dtype: torch.dtype
    channels_last: bool
    bgr: bool

    @property
    def name(self) -> str:
        return (f"u8/255:{str(self.dtype).removeprefix('torch.')}:{'cl' if self.channels_last else 'nchw'}"
                f"{':bgr' if self.bgr else ''}")

    def __call__(self, x: Tensor) -> Tensor:
        if self.bgr:
            x = x.flip(1)
        return normalized(x, dtype=self.dtype,
                          memory_format=torch.channels_last if self.channels_last else torch.contiguous_format)


def preprocess_pixels(images: list[np.ndarray], imgsz: tuple[int, int], device: torch.device, *,
                      dtype: torch.dtype = torch.float32, channels_last: bool = False, rect: bool = False,
                      stride: int = 32, staging: Staging | None = None,
                      bgr: bool = False) -> tuple[Tensor, list[LetterboxParams], Normalize]:
    """:func:`preprocess` up to, not including, its last step: (the letterboxed 0..255 pixels
    Tensor[B, 3, H, W] on ``device``, letterbox params, the :class:`Normalize` that turns them into
    what :func:`preprocess` returns). Same-shaped images without a resize or pad stay the uploaded
    uint8 (a view of the HWC upload: channels-last strides); a resize makes float32 values."""
    x, params, in_bgr = _letterboxed(images, imgsz, device, rect=rect, stride=stride, staging=staging, bgr=bgr,
                                     swap=False)
    return x, params, Normalize(dtype=dtype, channels_last=channels_last, bgr=in_bgr)


def _letterboxed(images: list[np.ndarray], imgsz: tuple[int, int], device: torch.device, *, rect: bool,
                 stride: int, staging: Staging | None, bgr: bool,
                 swap: bool) -> tuple[Tensor, list[LetterboxParams], bool]:
    """Upload and letterbox; ``swap``: BGR channels are swapped here (else the caller's job, told by
    the returned flag)."""
    shapes = [tuple(int(v) for v in im.shape[:2]) for im in images]
    out_shape = letterbox_shape(shapes, imgsz, stride=stride, rect=rect)
    if len(set(shapes)) == 1:
        arr = images[0][None] if len(images) == 1 else np.stack(images)  # (B, h, w, 3)
        t = (staging or _STAGING).upload(np.ascontiguousarray(arr), device).permute(0, 3, 1, 2)
        if bgr and swap:
            t = t.flip(1)
        x, p = letterbox_batch(t, out_shape)
        return x, [p] * len(images), bgr and not swap
    boxed, params = [], []
    for im in images:
        t = torch.from_numpy(np.ascontiguousarray(im)).to(device, non_blocking=True).permute(2, 0, 1)
        if bgr and swap:
            t = t.flip(0)
        b, p = letterbox(t, out_shape)
        boxed.append(b)
        params.append(p)
    return torch.stack(boxed), params, bgr and not swap


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
    x, params, _ = _letterboxed(images, imgsz, device, rect=rect, stride=stride, staging=staging, bgr=bgr,
                                swap=True)
    fmt = torch.channels_last if channels_last else torch.contiguous_format
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
