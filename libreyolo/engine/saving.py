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

Example:
    >>> from pathlib import Path
    >>> namer = OutputNamer(Path("/tmp/out"), ["/data/a/img.jpg", "/data/b/img.jpg", "/data/c.png"])
    >>> [str(namer.path_for(p, None)) for p in ["/data/a/img.jpg", "/data/b/img.jpg", "/data/c.png"]]
    ['/tmp/out/a/img.jpg', '/tmp/out/b/img.jpg', '/tmp/out/c.png']
"""

from __future__ import annotations

import glob
import os
from collections import Counter
from collections.abc import Iterable
from pathlib import Path
from typing import Any

from ..errors import ConfigError
from .results import WRITABLE_SUFFIXES
from .sources import _GLOB_CHARS, _URL, IMAGE_SUFFIXES, VIDEO_SUFFIXES

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
        if p.is_dir():
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
