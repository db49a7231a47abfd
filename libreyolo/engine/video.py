"""Video in and out for prediction: captures (files, webcams, stream URLs), video files written
from annotated frames, and an optional display window.

- :func:`open_capture` is the one place a ``cv2.VideoCapture`` is made; tests replace it with
  a fake object that has ``isOpened()``, ``read()``, ``grab()``, ``get()`` and ``release()``.
- :func:`iter_frames` yields ``(index, bgr)`` of every ``vid_stride``-th frame (the index is the
  frame's position in the source, so frame 0, 3, 6... with ``vid_stride=3``); skipped frames are
  grabbed, not decoded.
- :class:`VideoSink` writes BGR frames to ``.mp4`` (``mp4v``), falling back to ``.avi``
  (``MJPG``) when this OpenCV build cannot write mp4; it opens on the first frame (the size) and
  must be closed (:meth:`VideoSink.close`) to finish the file.
- :func:`display_available` says whether ``cv2.imshow`` can open a window here (a GUI build of
  OpenCV and, on Linux, a ``DISPLAY`` / ``WAYLAND_DISPLAY``).

Example:
    >>> import numpy as np, tempfile, pathlib
    >>> d = pathlib.Path(tempfile.mkdtemp())
    >>> sink = VideoSink(d / "out.mp4", fps=10)
    >>> for _ in range(3):
    ...     sink.write(np.zeros((32, 48, 3), np.uint8))
    >>> sink.close().suffix in (".mp4", ".avi"), sink.frames
    (True, 3)
"""

from __future__ import annotations

import logging
import os
import sys
from collections import OrderedDict
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import numpy as np

from .._cv import require_cv2
from ..errors import ConfigError

logger = logging.getLogger(__name__)

DEFAULT_FPS = 30.0
# (fourcc, suffix) tried in order; the first that opens wins
CODECS: tuple[tuple[str, str], ...] = (("mp4v", ".mp4"), ("MJPG", ".avi"))
_FPS: OrderedDict[str, float] = OrderedDict()  # source -> frames per second seen when it was opened


def open_capture(target: str | int) -> Any:
    """A ``cv2.VideoCapture`` for a file path, a stream URL or a webcam index (the test seam)."""
    cv2 = require_cv2("reading and writing video")

    return cv2.VideoCapture(target)


def remember_fps(source: str, fps: float) -> None:
    """Record the frame rate of an opened source so that its video output keeps the same speed."""
    if fps and np.isfinite(fps) and 0 < fps < 1000:
        _FPS[source] = float(fps)
        _FPS.move_to_end(source)
        while len(_FPS) > 64:
            _FPS.popitem(last=False)


def source_fps(source: str | None) -> float:
    """The frame rate recorded for ``source`` (:func:`remember_fps`), else :data:`DEFAULT_FPS`."""
    return _FPS.get(source, DEFAULT_FPS) if source is not None else DEFAULT_FPS


def iter_frames(cap: Any, *, name: str, vid_stride: int = 1) -> Iterator[tuple[int, np.ndarray]]:
    """Yield ``(index, bgr)`` for frames 0, ``vid_stride``, 2 * ``vid_stride``... of an opened
    capture until it ends; grayscale frames come back as 3-channel BGR. ``cap`` is released."""
    cv2 = require_cv2("reading and writing video")

    try:
        remember_fps(name, float(cap.get(cv2.CAP_PROP_FPS) or 0.0))
        index = 0
        while True:
            ok, frame = cap.read()
            if not ok or frame is None:
                break
            if frame.ndim == 2:
                frame = cv2.cvtColor(frame, cv2.COLOR_GRAY2BGR)
            yield index, np.ascontiguousarray(frame)
            index += 1
            for _ in range(vid_stride - 1):  # skipped frames: grab without decoding
                if not cap.grab():
                    return
                index += 1
    finally:
        cap.release()


class VideoSink:
    """Writes BGR uint8 frames of one size to a video file.

    Args:
        path: the file to write; its suffix is replaced by the codec's (``.mp4`` or ``.avi``).
        fps: frames per second of the output.
        codecs: ``(fourcc, suffix)`` pairs to try in order (default :data:`CODECS`).

    Attributes:
        path (Path): the file actually written (known after the first frame).
        frames (int): frames written so far.
    """

    def __init__(self, path: str | Path, *, fps: float = DEFAULT_FPS,
                 codecs: tuple[tuple[str, str], ...] = CODECS) -> None:
        if not codecs:
            raise ConfigError("VideoSink needs at least one (fourcc, suffix) codec")
        self.path = Path(path)
        self.fps = float(fps) if fps and fps > 0 else DEFAULT_FPS
        self.codecs = codecs
        self.frames = 0
        self._writer: Any = None
        self._size: tuple[int, int] | None = None

    def _open(self, size: tuple[int, int]) -> None:
        cv2 = require_cv2("reading and writing video")

        self.path.parent.mkdir(parents=True, exist_ok=True)
        tried = []
        for fourcc, suffix in self.codecs:
            target = self.path.with_suffix(suffix)
            writer = cv2.VideoWriter(str(target), cv2.VideoWriter_fourcc(*fourcc), self.fps, size)
            if writer.isOpened():
                if tried:
                    logger.warning("OpenCV cannot write %s here; wrote %s with %s instead",
                                   ", ".join(tried), target.name, fourcc)
                self._writer, self.path, self._size = writer, target, size
                return
            writer.release()
            target.unlink(missing_ok=True)
            tried.append(f"{suffix} ({fourcc})")
        raise ConfigError(f"OpenCV could not open a video writer for '{self.path}' with any of "
                          f"{', '.join(tried)}; install an OpenCV build with FFMPEG, or save frames as images")

    def write(self, frame: np.ndarray) -> None:
        """Append one BGR (H, W, 3) uint8 frame; frames of another size are resized to the first's."""
        cv2 = require_cv2("reading and writing video")

        size = (int(frame.shape[1]), int(frame.shape[0]))
        if self._writer is None:
            self._open(size)
        elif size != self._size:
            frame = cv2.resize(frame, self._size, interpolation=cv2.INTER_LINEAR)
        self._writer.write(np.ascontiguousarray(frame))
        self.frames += 1

    def close(self) -> Path:
        """Finish the file (idempotent) and return its path."""
        if self._writer is not None:
            self._writer.release()
            self._writer = None
            logger.info("wrote %d frames to %s", self.frames, self.path)
        return self.path


def display_available() -> bool:
    """Whether ``cv2.imshow`` can open a window: a GUI build of OpenCV and a display to show it on."""
    if sys.platform.startswith("linux") and not (os.environ.get("DISPLAY") or os.environ.get("WAYLAND_DISPLAY")):
        return False
    try:
        cv2 = require_cv2("reading and writing video")
    except ImportError:
        return False
    info = cv2.getBuildInformation()
    gui = info.split("GUI:", 1)[1].splitlines()[0].strip() if "GUI:" in info else ""
    return bool(gui) and gui.upper() != "NONE"


def show_frame(window: str, frame: np.ndarray) -> None:
    """Show a BGR frame in a named window (1 ms event wait, so video plays)."""
    cv2 = require_cv2("reading and writing video")

    cv2.imshow(window, frame)
    cv2.waitKey(1)
