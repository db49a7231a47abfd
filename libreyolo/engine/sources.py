"""Prediction sources -> batches of images for the network (SPEC U-2).

:func:`load_source` accepts a file path, a directory, a glob pattern, a video file, a ``.txt``
file listing any of these (one per line; relative lines are relative to the list's folder, ``#``
starts a comment), a webcam index (``0`` or ``"0"``), a stream URL (``rtsp://``, ``rtmp://``,
``http(s)://`` of a video or stream), a PIL image, a numpy array, a torch tensor, or a list of any
of these, and returns a :class:`SourceLoader`
that yields lists of up to ``batch`` :class:`SourceItem` objects. Everything a user could get
wrong (missing path, empty folder, wrong array shape or dtype, unsupported type) is checked when
:func:`load_source` is called, before the first image is decoded, and raises
:class:`~libreyolo.errors.SourceError`. Images and video frames are read lazily, one batch at a
time, so a long video streams in constant memory.

A file that cannot be decoded (corrupt, truncated, not an image) is skipped with one warning
naming it, and recorded in :attr:`SourceLoader.skipped`, so one bad file does not stop a folder;
only when nothing at all could be read does iterating raise :class:`SourceError`.

Colour convention (the one place it is defined; the README links here):

- numpy arrays are **BGR** (OpenCV order: what ``cv2.imread`` and ``cv2.VideoCapture`` give),
  unless ``bgr=False`` says they are RGB;
- PIL images and torch tensors are **RGB**;
- files and video frames are decoded by OpenCV (BGR) and converted;
- :attr:`SourceItem.image`, what the network is fed, is always RGB;
  :attr:`SourceItem.orig` is the same pixels in BGR, what :class:`~libreyolo.engine.results.Results`
  keeps as ``orig_img`` and what ``Results.plot()`` draws on and returns.

Example:
    >>> import numpy as np
    >>> bgr = np.zeros((4, 6, 3), np.uint8); bgr[..., 2] = 255  # pure red in OpenCV order
    >>> (item,), = load_source(bgr, batch=1)
    >>> item.image[0, 0].tolist(), item.orig[0, 0].tolist()
    ([255, 0, 0], [0, 0, 255])
"""

from __future__ import annotations

import glob
import logging
import re
from collections.abc import Callable, Iterable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

from ..data.images import (  # noqa: F401 - re-exported: where users and tests found them
    IMAGE_SUFFIXES,
    VIDEO_SUFFIXES,
    UnreadableFile,
    decode_image,
    read_image,
    swap_rb,
)
from ..errors import SourceError
from .arrays import _from_array, _from_pil, _from_tensor, _is_pil, _is_tensor

logger = logging.getLogger(__name__)

SUPPORTED_TYPES = (
    "a file path (str or pathlib.Path) to an image or video, a directory, a glob pattern, "
    "a .txt file listing paths, a webcam index (0), a stream URL (rtsp://, http://...), "
    "a PIL.Image, a numpy array (H x W x 3 uint8, BGR), a torch tensor (3 x H x W or B x 3 x H x W), "
    "or a list of these"
)
_GLOB_CHARS = re.compile(r"[*?\[]")
_URL = re.compile(r"^[a-zA-Z][a-zA-Z0-9+.-]*://")
STREAM_SCHEMES: frozenset[str] = frozenset({"rtsp", "rtsps", "rtmp", "rtmps", "http", "https", "tcp", "udp", "srt"})


@dataclass(frozen=True, kw_only=True)
class SourceItem:
    """One image or video frame.

    Attributes:
        rgb (np.ndarray[H, W, 3] | None): RGB pixels when the source gave them in that order (PIL
            images, tensors, ``bgr=False`` arrays); otherwise made from ``bgr`` on first use of
            :attr:`image` (prediction on CUDA swaps the channels on the device instead).
        path: the file it came from, or ``None`` for in-memory images.
        frame: 0-based frame index for video frames, else ``None``.
        bgr (np.ndarray[H, W, 3] | None): the same pixels in BGR when the source gave them in
            that order (files, video frames, BGR numpy arrays); read them through :attr:`orig`.
        One of ``rgb`` and ``bgr`` is always set.
    """

    rgb: np.ndarray | None = None
    path: str | None = None
    frame: int | None = None
    bgr: np.ndarray | None = None

    def __post_init__(self) -> None:
        if self.rgb is None and self.bgr is None:
            raise ValueError("SourceItem needs rgb or bgr pixels")

    @property
    def image(self) -> np.ndarray:
        """(np.ndarray[H, W, 3], uint8, C-contiguous): RGB pixels, what the network is fed."""
        if self.rgb is None:
            object.__setattr__(self, "rgb", swap_rb(self.bgr))  # once, then kept
        return self.rgb

    @property
    def shape(self) -> tuple[int, int]:
        """(height, width) of the image."""
        arr = self.rgb if self.rgb is not None else self.bgr
        return int(arr.shape[0]), int(arr.shape[1])

    @property
    def orig(self) -> np.ndarray:
        """(np.ndarray[H, W, 3], uint8, C-contiguous): BGR pixels (OpenCV order), for ``Results.orig_img``."""
        if self.bgr is not None:
            return self.bgr
        return swap_rb(self.image)


@dataclass(frozen=True, kw_only=True)
class SkippedFile:
    """A source file that could not be decoded and was left out."""

    path: str
    reason: str


class SourceLoader:
    """The batches of a source: an iterator of ``list[SourceItem]`` that also counts what it skipped.

    Attributes:
        skipped (list[SkippedFile]): files that could not be decoded, in source order (each was
            logged once as a WARNING with ``extra={"skipped_source": path}``).
        n_read (int): images and frames yielded so far.

    Iterating raises :class:`SourceError` at the end when every file was skipped and nothing was
    read (the message of the only file, or a count and the first reason).
    """

    def __init__(self, entries: list[_Entry], batch: int) -> None:
        self.skipped: list[SkippedFile] = []
        self.n_read = 0
        self._it = self._batched(entries, batch)

    def __iter__(self) -> SourceLoader:
        return self

    def __next__(self) -> list[SourceItem]:
        return next(self._it)

    @property
    def n_skipped(self) -> int:
        return len(self.skipped)

    def _items(self, entry: _Entry) -> Iterator[SourceItem]:
        try:
            for item in entry():
                self.n_read += 1
                yield item
        except UnreadableFile as e:
            self.skipped.append(SkippedFile(path=e.path, reason=str(e)))
            logger.warning("skipping an unreadable file: %s", e, extra={"skipped_source": e.path})

    def _batched(self, entries: list[_Entry], batch: int) -> Iterator[list[SourceItem]]:
        chunk: list[SourceItem] = []
        for entry in entries:
            for item in self._items(entry):
                chunk.append(item)
                if len(chunk) == batch:
                    yield chunk
                    chunk = []
        if chunk:
            yield chunk
        if self.n_read == 0 and self.skipped:
            if len(self.skipped) == 1:
                raise SourceError(self.skipped[0].reason)
            raise SourceError(f"none of the {len(self.skipped)} files of the source could be read, e.g. "
                              f"{self.skipped[0].reason}")


# An entry of the plan: a callable that yields the items of one source element lazily.
_Entry = Callable[[], Iterator[SourceItem]]


def load_source(source: Any, *, batch: int, bgr: bool = True, vid_stride: int = 1) -> SourceLoader:
    """Resolve ``source`` and return a :class:`SourceLoader` of lists of up to ``batch`` items.

    Args:
        source: see the module docstring; lists are flattened in order.
        batch: the largest number of items per yielded list (>= 1).
        bgr: numpy arrays are BGR (OpenCV order) when True (the default, as ``cv2.imread``
            gives them), RGB when False. Files, PIL images and tensors do not depend on it.
        vid_stride: read every ``vid_stride``-th frame of videos, webcams and streams (>= 1);
            :attr:`SourceItem.frame` stays the frame's index in the source.

    Webcams and streams are opened when iteration reaches them; one that cannot be opened
    raises :class:`SourceError` then (a stream that stops delivering frames ends its items).

    Raises:
        SourceError: missing path, empty directory or glob, unsupported type, bad array, a list
            file with a missing entry.
    """
    if isinstance(batch, bool) or not isinstance(batch, int) or batch < 1:
        raise SourceError(f"batch must be a positive int, got {batch!r}")
    if isinstance(vid_stride, bool) or not isinstance(vid_stride, int) or vid_stride < 1:
        raise SourceError(f"vid_stride must be a positive int (1 reads every frame), got {vid_stride!r}")
    entries = _plan(source, bgr=bgr, top=True, stride=vid_stride)
    if not entries:
        raise SourceError("the source is an empty list; pass at least one image")
    return SourceLoader(entries, batch)


# ---------------------------------------------------------------------------- planning
def _plan(source: Any, *, bgr: bool, top: bool, stride: int = 1) -> list[_Entry]:
    """Validate ``source`` and turn it into a list of lazy entries (no decoding yet)."""
    if source is None:
        raise SourceError(f"no source given; pass {SUPPORTED_TYPES}")
    if isinstance(source, int) and not isinstance(source, bool):
        return [_capture_entry(source, stride=stride)]
    if isinstance(source, (str, Path)):
        return _plan_path(source, stride=stride)
    if isinstance(source, np.ndarray):
        return _plan_array(source, bgr=bgr)
    if _is_pil(source):
        return [_const(_from_pil(source))]
    if _is_tensor(source):
        return [_const(im) for im in _from_tensor(source)]
    if isinstance(source, (list, tuple)) and top:
        out: list[_Entry] = []
        for element in source:
            out.extend(_plan(element, bgr=bgr, top=False, stride=stride))
        return out
    if isinstance(source, (list, tuple)):
        raise SourceError("nested lists are not supported as a source; pass one flat list")
    raise SourceError(f"unsupported source type {type(source).__name__}; pass {SUPPORTED_TYPES}")


def _plan_path(source: str | Path, *, stride: int = 1, listed: bool = True) -> list[_Entry]:
    text = str(source)
    if not text.strip():
        raise SourceError("the source is an empty string; pass an image, video, folder or glob path")
    if _URL.match(text):
        return [_url_entry(text, stride=stride)]
    path = Path(text).expanduser()
    if text.strip().isdigit() and not path.exists():
        return [_capture_entry(int(text), stride=stride)]
    if path.suffix.lower() == ".txt" and path.is_file():
        if not listed:
            raise SourceError(f"list file '{path}' names another list file; list image/video paths only")
        return _plan_list(path, stride=stride)
    if path.is_dir():
        files = _natural_sorted(
            p for p in path.iterdir() if p.is_file() and p.suffix.lower() in IMAGE_SUFFIXES | VIDEO_SUFFIXES
        )
        if not files:
            raise SourceError(
                f"directory '{path}' contains no image or video files "
                f"(looked for {', '.join(sorted(IMAGE_SUFFIXES | VIDEO_SUFFIXES))})"
            )
        return [_file_entry(p, stride=stride) for p in files]
    if path.exists():
        if not path.is_file():
            raise SourceError(f"'{path}' is not a regular file")
        return [_file_entry(path, stride=stride)]
    if _GLOB_CHARS.search(text):
        matches = _natural_sorted(
            Path(m) for m in glob.glob(str(Path(text).expanduser()), recursive=True)
            if Path(m).is_file() and Path(m).suffix.lower() in IMAGE_SUFFIXES | VIDEO_SUFFIXES
        )
        if not matches:
            raise SourceError(f"glob pattern '{text}' matched no image or video files")
        return [_file_entry(p, stride=stride) for p in matches]
    raise SourceError(f"source '{text}' does not exist; check the path (relative to {Path.cwd()})")


def list_file_entries(path: Path) -> list[str]:
    """The sources a ``.txt`` list file names, one per non-blank line (``#`` comments dropped);
    relative paths are taken relative to the list file's folder (then the working directory)."""
    try:
        lines = path.read_text(encoding="utf-8").splitlines()
    except (OSError, UnicodeDecodeError) as e:
        raise SourceError(f"cannot read the list file '{path}': {e}") from e
    out = []
    for line in lines:
        entry = line.split("#", 1)[0].strip() if not _URL.match(line.strip()) else line.strip()
        if not entry:
            continue
        if not _URL.match(entry) and not Path(entry).expanduser().is_absolute():
            beside = path.parent / entry
            if beside.exists() or _GLOB_CHARS.search(entry) or not Path(entry).exists():
                entry = str(beside)
        out.append(entry)
    return out


def _plan_list(path: Path, *, stride: int) -> list[_Entry]:
    entries = list_file_entries(path)
    if not entries:
        raise SourceError(f"list file '{path}' names no sources; put one image/video path per line")
    out: list[_Entry] = []
    for i, entry in enumerate(entries, 1):
        try:
            out.extend(_plan_path(entry, stride=stride, listed=False))
        except SourceError as e:
            raise SourceError(f"list file '{path}', entry {i} ({entry!r}): {e} ('.txt' is not a known image or "
                              "video extension: a .txt source is read as a list of image/video paths, one per "
                              "line)") from e
    return out


def _url_entry(url: str, *, stride: int) -> _Entry:
    scheme = url.split("://", 1)[0].lower()
    suffix = Path(url.split("?", 1)[0]).suffix.lower()
    if scheme not in STREAM_SCHEMES or suffix in IMAGE_SUFFIXES:
        raise SourceError(
            f"URL {url!r} is not a video stream; image URLs are not downloaded (download the file and pass "
            f"its path); stream URLs use {', '.join(sorted(STREAM_SCHEMES))}"
        )
    return _capture_entry(url, stride=stride)


def _capture_entry(target: str | int, *, stride: int) -> _Entry:
    """A webcam index or a stream URL, opened now (so a wrong one fails before any model work)."""
    from . import video

    name = f"webcam{target}" if isinstance(target, int) else target
    if isinstance(target, int) and target < 0:
        raise SourceError(f"webcam index must be >= 0, got {target}; pass {SUPPORTED_TYPES}")
    cap = video.open_capture(target)
    if not cap.isOpened():
        cap.release()
        if isinstance(target, int):
            raise SourceError(f"cannot open webcam {target}: no camera with that index here; if {target} was not "
                              f"meant as a webcam index, pass {SUPPORTED_TYPES}")
        raise SourceError(f"cannot open stream {target!r}: the address is unreachable or not a video "
                          "OpenCV can decode")

    def read() -> Iterator[SourceItem]:
        n = 0
        for index, bgr in video.iter_frames(cap, name=name, vid_stride=stride):
            n += 1
            yield SourceItem(path=name, frame=index, bgr=bgr)
        logger.info("%s ended after %d frames", name, n)

    return read


def _file_entry(path: Path, *, stride: int = 1) -> _Entry:
    if path.suffix.lower() in VIDEO_SUFFIXES:
        return lambda: _read_video(path, stride=stride)

    def read() -> Iterator[SourceItem]:
        rgb, bgr = decode_image(path)
        yield SourceItem(rgb=rgb, path=str(path), bgr=bgr)

    return read


def _plan_array(arr: np.ndarray, *, bgr: bool) -> list[_Entry]:
    if arr.ndim == 4:
        return [_const(*_from_array(a, bgr=bgr, what=f"array[{i}]")) for i, a in enumerate(arr)]
    return [_const(*_from_array(arr, bgr=bgr, what="array"))]


def _const(image: np.ndarray | None, bgr: np.ndarray | None = None) -> _Entry:
    return lambda: iter((SourceItem(rgb=image, bgr=bgr),))


def _natural_sorted(paths: Iterable[Path]) -> list[Path]:
    """Sort so that 'img2' comes before 'img10'."""

    def key(p: Path) -> list[Any]:
        return [(0, int(t), "") if t.isdigit() else (1, 0, t.lower()) for t in re.split(r"(\d+)", str(p))]

    return sorted(paths, key=key)


# ---------------------------------------------------------------------------- decoding
def _read_video(path: Path, *, stride: int = 1) -> Iterator[SourceItem]:
    """Yield every ``stride``-th frame of a video one at a time (RGB + BGR), with its 0-based index."""
    from . import video

    cap = video.open_capture(str(path))
    if not cap.isOpened():
        cap.release()
        raise UnreadableFile(f"cannot open video '{path}': the file is corrupt or its codec is unsupported "
                             "by OpenCV", path=str(path))
    n = 0
    for index, frame in video.iter_frames(cap, name=str(path), vid_stride=stride):
        n += 1
        yield SourceItem(path=str(path), frame=index, bgr=frame)
    if n == 0:
        raise UnreadableFile(f"video '{path}' has no readable frames (corrupt file or unsupported codec)",
                             path=str(path))
    logger.debug("read %d frames from %s", n, path)
