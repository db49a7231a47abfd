"""Where ``predict(save=True)`` writes each annotated image: unique names that never overwrite an input.

:class:`OutputNamer` is built once per prediction run from the ``save_dir`` and the ``source``
(before the first image is read), and then names each result's file:

- a ``save_dir`` that is the folder of the source images, or where a result's name would land
  on a source file, is refused with a :class:`~libreyolo.errors.ConfigError`, so originals are
  never written over;
- a file keeps its stem (``bus.jpg`` -> ``bus.jpg``; formats ``save()`` cannot write become
  ``.jpg``); video frames are ``<stem>_<frame:06d>.jpg``; in-memory images ``image<N>.jpg``;
- inputs that would share a name (``a/img.jpg`` and ``b/img.jpg``) go to sub-folders that mirror
  their path below the inputs' common folder (``a/img.jpg``, ``b/img.jpg`` under ``save_dir``);
- anything that still collides (the same file twice, a name an earlier result took, an input file
  that happens to live under ``save_dir``) gets a counter: ``img_2.jpg``, ``img_3.jpg``...

:class:`ResultWriter` is what ``predict`` / ``track`` call on each result: the annotated
image (``save``), or for video frames one video file per source video (``<stem>.mp4``, through
:class:`~libreyolo.engine.video.VideoSink`), YOLO label lines (``save_txt``, under ``labels/``),
per-box crops (``save_crop``, under ``crops/<class>/``) and a display window (``show``).

Example:
    >>> from pathlib import Path
    >>> namer = OutputNamer(Path("/tmp/out"), ["/data/a/img.jpg", "/data/b/img.jpg", "/data/c.png"])
    >>> [str(namer.path_for(p, None)) for p in ["/data/a/img.jpg", "/data/b/img.jpg", "/data/c.png"]]
    ['/tmp/out/a/img.jpg', '/tmp/out/b/img.jpg', '/tmp/out/c.png']
"""

from __future__ import annotations

import glob
import logging
import os
import weakref
from collections import Counter
from collections.abc import Iterable
from pathlib import Path
from typing import Any

from ..errors import ConfigError, SourceError
from .results import WRITABLE_SUFFIXES, Results, next_run_dir
from .sources import _GLOB_CHARS, _URL, IMAGE_SUFFIXES, VIDEO_SUFFIXES, list_file_entries

logger = logging.getLogger(__name__)

# tasks whose predictions have no label-line format: save_txt is refused with what to use instead
NO_LABEL_FILES: dict[str, str] = {
    "restore": "a restored image is not a label; save=True writes the restored images",
}

_MEDIA = IMAGE_SUFFIXES | VIDEO_SUFFIXES


class OutputNamer:
    """Names the output file of each prediction result (see the module docstring).

    Args:
        save_dir: the folder results go to (need not exist yet; nothing is created here).
        source: the ``source`` given to ``predict`` (paths, folders, globs, lists, arrays...);
            only its file paths matter.

    Raises:
        ConfigError: ``save_dir`` is an existing file or the folder of a source file, or a
            result's name would land on a source file (``save_dir`` above the source folders).
    """

    def __init__(self, save_dir: str | Path, source: Any) -> None:
        self.save_dir = Path(save_dir)
        if self.save_dir.is_file():
            raise ConfigError(f"save_dir '{self.save_dir}' is an existing file; pass a folder to save results in.")
        self._inputs = input_files(source)
        self._input_set = {_real(p) for p in self._inputs}
        out = _real(self.save_dir)
        for p in self._inputs:
            if _real(p.parent) == out:
                raise ConfigError(
                    f"save_dir '{self.save_dir}' is the folder of the source image '{p.name}', so results "
                    "could overwrite the originals; choose another folder, e.g. "
                    f"save_dir={self.save_dir / 'predictions'}, or leave save_dir unset (runs/<task>/predict<N>).")
        self._sub = _subfolders(self._inputs)
        self._issued: set[Path] = set()
        for p in self._inputs:
            natural = _real(self._natural(p, None, None))
            if natural in self._input_set:
                raise ConfigError(
                    f"save_dir '{self.save_dir}' would put a result on top of the source image '{natural}'; "
                    "choose a folder outside the source folders, or leave save_dir unset (runs/<task>/predict<N>).")

    @property
    def inputs(self) -> list[Path]:
        """The source files found (what is never overwritten)."""
        return list(self._inputs)

    def path_for(self, item_path: str | None, frame: int | None, suffix: str | None = None) -> Path:
        """The file to write the result of ``item_path`` (frame ``frame``) to, unique in this run.

        Args:
            item_path: the file the image came from (``SourceItem.path``), ``None`` in memory.
            frame: the 0-based video frame, else ``None``.
            suffix: the output format (``".png"``); ``None`` keeps the source's format when
                ``Results.save`` can write it, else ``.jpg`` (always ``.jpg`` for frames and
                in-memory images).

        Returns:
            A path under ``save_dir`` that is no input file and was not returned before.
        """
        if suffix is not None and not suffix.startswith("."):
            suffix = "." + suffix
        if item_path is None:
            return self._claim(self.save_dir, "image", suffix or ".jpg", start=0, in_memory=True)
        natural = self._natural(Path(item_path), frame, suffix)
        return self._claim(natural.parent, natural.stem, natural.suffix)

    def _natural(self, src: Path, frame: int | None, suffix: str | None) -> Path:
        """The name before any counter: sub-folder (for clashing names) / stem[_frame] + suffix."""
        if suffix is None:
            own = src.suffix.lower()
            suffix = own if frame is None and own in WRITABLE_SUFFIXES else ".jpg"
        folder = self.save_dir / self._sub.get(_real(src), Path())
        stem = src.stem if frame is None else f"{src.stem}_{frame:06d}"
        return folder / f"{stem}{suffix}"

    def _claim(self, folder: Path, stem: str, suffix: str, *, start: int = 1, in_memory: bool = False) -> Path:
        n = start
        while True:
            if in_memory:
                cand = folder / f"{stem}{n}{suffix}"
            else:
                cand = folder / (f"{stem}{suffix}" if n == 1 else f"{stem}_{n}{suffix}")
            real = _real(cand)
            taken = real in self._issued or real in self._input_set or (in_memory and cand.exists())
            if not taken:
                self._issued.add(real)
                return cand
            n += 1


def input_files(source: Any) -> list[Path]:
    """The files a ``predict`` source names (paths, folder contents, glob matches), in no decoding.

    Example:
        >>> input_files(["/nowhere/a.jpg", 3])
        [PosixPath('/nowhere/a.jpg')]
    """
    out: list[Path] = []
    items: Iterable[Any] = source if isinstance(source, (list, tuple)) else [source]
    for s in items:
        if not isinstance(s, (str, Path)) or not str(s).strip() or _URL.match(str(s)):
            continue
        p = Path(str(s)).expanduser()
        if p.suffix.lower() == ".txt" and p.is_file():
            try:
                out.extend(input_files(list_file_entries(p)))
            except SourceError:
                pass  # an unreadable list is reported by load_source
            out.append(p)
        elif p.is_dir():
            out.extend(q for q in p.iterdir() if q.is_file() and q.suffix.lower() in _MEDIA)
        elif p.exists() or not _GLOB_CHARS.search(str(s)):
            out.append(p)
        else:
            out.extend(Path(m) for m in glob.glob(str(p), recursive=True)
                       if Path(m).is_file() and Path(m).suffix.lower() in _MEDIA)
    return out


def _real(p: Path) -> Path:
    return Path(os.path.realpath(p))


def _subfolders(inputs: list[Path]) -> dict[Path, Path]:
    """For inputs whose output names would collide, their folder relative to the inputs' common folder."""
    def key(p: Path) -> tuple[str, str]:
        own = p.suffix.lower()
        return p.stem, own if own in WRITABLE_SUFFIXES else ".jpg"

    reals = list(dict.fromkeys(_real(p) for p in inputs))
    counts = Counter(key(p) for p in reals)
    clashing = [p for p in reals if counts[key(p)] > 1]
    if not clashing:
        return {}
    try:
        root = Path(os.path.commonpath([str(p.parent) for p in clashing]))
    except ValueError:  # different drives (Windows)
        root = None
    out: dict[Path, Path] = {}
    for p in clashing:
        rel = p.parent.relative_to(root) if root is not None else Path(p.parent.name)
        out[p] = rel if str(rel) != "." else Path()
    return out


class ResultWriter:
    """Writes what a prediction run asked for, one result at a time (see the module docstring).

    Args:
        task: names the default run folder ``runs/<task>/predict<N>`` (made on first write).
        source: the ``predict`` source (its files are never overwritten).
        save: annotated images; video frames go into one video file per source video.
        save_dir: the run folder (``None``: the next free ``runs/<task>/predict<N>``).
        save_txt / save_conf: YOLO label lines under ``labels/`` (with the confidence); for the
            ``semantic`` task the class ids as index-mask PNGs under ``masks/``, for ``depth`` the maps
            as float32 ``.npy`` under ``depth/``, for ``matte`` the 8-bit alpha PNGs under ``masks/``
            (the dataset formats).
            A task without a label format (``restore``, :data:`NO_LABEL_FILES`) refuses ``save_txt``
            with a :class:`~libreyolo.errors.ConfigError` before anything is read or written.
        save_crop: each box's crop under ``crops/<class name>/``.
        line_width: box outline width for everything drawn (``None``: scaled to the image).
        show: show each annotated image in a window, when a display exists (otherwise one warning).
        vid_stride: the frame stride of the run; written videos play at ``fps / vid_stride``.

    Call :meth:`close` (or let the writer be garbage-collected) to finish open video files.
    """

    def __init__(self, *, task: str, source: Any, save: bool = False, save_dir: str | Path | None = None,
                 save_txt: bool = False, save_conf: bool = False, save_crop: bool = False,
                 line_width: int | None = None, show: bool = False, vid_stride: int = 1) -> None:
        if save_txt and task in NO_LABEL_FILES:
            raise ConfigError(f"save_txt has no label format for the {task} task: {NO_LABEL_FILES[task]}")
        self.task, self.source = task, source
        self.save, self.save_txt, self.save_conf, self.save_crop = save, save_txt, save_conf, save_crop
        self.line_width, self.vid_stride = line_width, vid_stride
        self.show = show and _can_show()
        self.writes = save or save_txt or save_crop
        self._dir = Path(save_dir) if save_dir is not None else None
        self.namer: OutputNamer | None = None
        self._labels: OutputNamer | None = None
        self._sinks: dict[str, Any] = {}
        self._finalizer = weakref.finalize(self, _close_sinks, self._sinks)
        if self.writes and self._dir is not None:
            self._namers(self._dir)  # a save_dir that could overwrite a source fails before any image is read

    @classmethod
    def from_options(cls, opts: Any, *, task: str, source: Any) -> ResultWriter:
        """From a :class:`~libreyolo.engine.predictor.PredictOptions` (or any object with its fields)."""
        return cls(task=task, source=source, save=opts.save, save_dir=opts.save_dir,
                   save_txt=getattr(opts, "save_txt", False), save_conf=getattr(opts, "save_conf", False),
                   save_crop=getattr(opts, "save_crop", False), line_width=getattr(opts, "line_width", None),
                   show=getattr(opts, "show", False), vid_stride=getattr(opts, "vid_stride", 1))

    @property
    def save_dir(self) -> Path | None:
        """The run folder (``None`` until something was written when no ``save_dir`` was given)."""
        return self._dir

    def _namers(self, folder: Path) -> None:
        self._dir = folder
        self.namer = OutputNamer(folder, self.source)
        if self.save_txt:
            sub = {"semantic": "masks", "depth": "depth", "matte": "masks"}.get(self.task, "labels")
            self._labels = OutputNamer(folder / sub, self.source)

    def __call__(self, r: Results) -> None:
        if self.show:
            from .video import show_frame

            show_frame(str(r.path or "libreyolo"), r.plot(line_width=self.line_width))
        if not self.writes:
            return
        if self.namer is None:
            self._namers(next_run_dir(Path("runs") / self.task / "predict"))
        assert self.namer is not None
        if self.save:
            if r.frame is not None and r.path is not None:
                self._write_frame(r)
            else:
                r.save(self.namer.path_for(r.path, r.frame), line_width=self.line_width)
        if self._labels is not None and r.alpha is not None and r.boxes is None:
            r.save_alpha(self._labels.path_for(r.path, r.frame, ".png"))
        elif self._labels is not None and r.depth is not None and r.boxes is None:
            r.save_depth(self._labels.path_for(r.path, r.frame, ".npy"))
        elif self._labels is not None and r.semantic is not None and r.boxes is None:
            r.save_mask(self._labels.path_for(r.path, r.frame, ".png"))
        elif self._labels is not None:
            r.save_txt(self._labels.path_for(r.path, r.frame, ".txt"), save_conf=self.save_conf)
        if self.save_crop:
            r.save_crop(self.namer.save_dir / "crops")

    def _write_frame(self, r: Results) -> None:
        from .video import VideoSink, source_fps

        key = str(r.path)
        sink = self._sinks.get(key)
        if sink is None:
            for other in list(self._sinks):  # a new video starts: the previous one is finished
                self._sinks.pop(other).close()
            assert self.namer is not None
            sink = VideoSink(self.namer.path_for(r.path, None, ".mp4"),
                             fps=source_fps(r.path) / self.vid_stride)
            self._sinks[key] = sink
        sink.write(r.plot(line_width=self.line_width))
        r.save_path = sink.path

    def close(self) -> list[Path]:
        """Finish every open video file; returns the files finished."""
        return _close_sinks(self._sinks)


def _close_sinks(sinks: dict[str, Any]) -> list[Path]:
    done = [sink.close() for sink in sinks.values()]
    sinks.clear()
    return done


_SHOW_WARNED: list[bool] = []


def _can_show() -> bool:
    from .video import display_available

    if display_available():
        return True
    if not _SHOW_WARNED:
        _SHOW_WARNED.append(True)
        logger.warning("show=True but no display is available here (no DISPLAY, or a headless OpenCV "
                       "build); results are not shown")
    return False
