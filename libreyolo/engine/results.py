"""Prediction results: :class:`Results` for one image or frame, :class:`Boxes` for its detections.

Tensor contract: ``Results.boxes.data`` is ``Tensor[N, 6]`` float32 on CPU, one row per
detection: x1, y1, x2, y2 (pixels of the original image), confidence, class id.

Colours: ``orig_img`` is BGR (OpenCV order) and so is what :meth:`Results.plot` returns, so
``cv2.imwrite(path, r.plot())`` and ``cv2.imshow`` show true colours; for PIL or matplotlib use
``r.plot()[..., ::-1]`` (RGB). The full convention is in :mod:`libreyolo.engine.sources`.

Task-specific fields are optional keyword arguments of :class:`Results` that default to
``None`` (``boxes``; ``probs``, a :class:`Probs` of Tensor[nc] class probabilities, for classification); a new task adds its own (for example ``probs``) the same way, and the
methods skip the fields a result does not have.

Example:
    >>> import numpy as np, torch
    >>> r = Results(orig_img=np.zeros((100, 200, 3), np.uint8), path=None, names={0: "circle"},
    ...             boxes=torch.tensor([[10.0, 20.0, 50.0, 60.0, 0.9, 0.0]]))
    >>> r.boxes.xywh.tolist()
    [[30.0, 40.0, 40.0, 40.0]]
    >>> r.verbose()
    '1 circle'
"""

from __future__ import annotations

import json
import logging
from collections import Counter
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import numpy as np
import torch
from torch import Tensor

from ..errors import ConfigError

logger = logging.getLogger(__name__)

WRITABLE_SUFFIXES = (".jpg", ".jpeg", ".png", ".bmp", ".webp", ".tif", ".tiff")
# file types a user may ask for that save() cannot write (anything else names a directory)
_UNWRITABLE_SUFFIXES = frozenset({".gif", ".svg", ".heic", ".heif", ".avif", ".ico", ".jp2", ".pdf", ".eps",
                                  ".mp4", ".avi", ".mov", ".mkv", ".webm", ".json", ".txt"})


class Boxes:
    """Detections of one image.

    Args:
        data (Tensor[N, 6] | np.ndarray[N, 6]): x1, y1, x2, y2, conf, cls; a single row (6,) is
            treated as N = 1.
        orig_shape: (h, w) of the image the pixel coordinates refer to.

    Properties return tensors, or numpy arrays after :meth:`numpy`.
    """

    def __init__(self, data: Tensor | np.ndarray, orig_shape: tuple[int, int], *, as_numpy: bool = False) -> None:
        if isinstance(data, np.ndarray):
            data = torch.from_numpy(data)
            as_numpy = True
        if not isinstance(data, Tensor):
            raise ConfigError(f"boxes must be a Tensor[N, 6] or an array, got {type(data).__name__}")
        if data.ndim == 1:
            data = data[None]
        if data.ndim != 2 or data.shape[1] != 6:
            raise ConfigError(f"boxes must have shape (N, 6) = x1, y1, x2, y2, conf, cls; got {tuple(data.shape)}")
        self._data = data
        self.orig_shape = (int(orig_shape[0]), int(orig_shape[1]))
        self._as_numpy = as_numpy

    def _out(self, t: Tensor) -> Any:
        return t.numpy() if self._as_numpy else t

    def _scale(self) -> Tensor:
        h, w = self.orig_shape
        return torch.tensor([w, h, w, h], dtype=self._data.dtype, device=self._data.device)

    @property
    def data(self) -> Any:
        """(N, 6): x1, y1, x2, y2, conf, cls."""
        return self._out(self._data)

    @property
    def xyxy(self) -> Any:
        """(N, 4) corners in pixels."""
        return self._out(self._data[:, :4])

    @property
    def conf(self) -> Any:
        """(N,) confidences."""
        return self._out(self._data[:, 4])

    @property
    def cls(self) -> Any:
        """(N,) class ids (float; use ``.long()`` / ``.astype(int)`` for indices)."""
        return self._out(self._data[:, 5])

    @property
    def xywh(self) -> Any:
        """(N, 4) centre x, centre y, width, height in pixels."""
        from ..ops.boxes import xyxy_to_xywh

        return self._out(xyxy_to_xywh(self._data[:, :4]))

    @property
    def xyxyn(self) -> Any:
        """(N, 4) corners divided by image width/height (0..1)."""
        return self._out(self._data[:, :4] / self._scale())

    @property
    def xywhn(self) -> Any:
        """(N, 4) centre and size divided by image width/height (0..1)."""
        from ..ops.boxes import xyxy_to_xywh

        return self._out(xyxy_to_xywh(self._data[:, :4]) / self._scale())

    @property
    def shape(self) -> tuple[int, ...]:
        return tuple(self._data.shape)

    def __len__(self) -> int:
        return int(self._data.shape[0])

    def __getitem__(self, idx: Any) -> Boxes:
        if isinstance(idx, int) and not isinstance(idx, bool):
            n = len(self)
            if not -n <= idx < n:
                raise IndexError(f"box index {idx} out of range for {n} boxes")
            idx = idx % n
            idx = slice(idx, idx + 1)  # keep (1, 6): properties stay 2-D
        if isinstance(idx, np.ndarray):
            idx = torch.from_numpy(idx)
        return Boxes(self._data[idx], self.orig_shape, as_numpy=self._as_numpy)

    def __iter__(self) -> Iterator[Boxes]:
        return (self[i] for i in range(len(self)))

    def cpu(self) -> Boxes:
        return Boxes(self._data.cpu(), self.orig_shape, as_numpy=self._as_numpy)

    def to(self, device: str | torch.device) -> Boxes:
        return Boxes(self._data.to(device), self.orig_shape, as_numpy=self._as_numpy)

    def numpy(self) -> Boxes:
        """The same boxes, with every property returning numpy arrays."""
        return Boxes(self._data.detach().cpu(), self.orig_shape, as_numpy=True)

    def tolist(self) -> list[list[float]]:
        return self._data.tolist()

    def __repr__(self) -> str:
        return f"Boxes(n={len(self)}, orig_shape={self.orig_shape}, data={self._data!r})"


class Probs:
    """Class probabilities of one image (classification).

    Args:
        data (Tensor[nc] | np.ndarray[nc]): probabilities (softmax output), float.

    ``top1`` (int), ``top5`` (list[int], best first, fewer when nc < 5), ``top1conf`` (Tensor
    scalar), ``top5conf`` (Tensor[k]); ``data`` as given (numpy after :meth:`numpy`).

    Example:
        >>> p = Probs(torch.tensor([0.1, 0.6, 0.3]))
        >>> p.top1, p.top5, round(float(p.top1conf), 2)
        (1, [1, 2, 0], 0.6)
    """

    def __init__(self, data: Tensor | np.ndarray, *, as_numpy: bool = False) -> None:
        if isinstance(data, np.ndarray):
            data = torch.from_numpy(data)
            as_numpy = True
        if not isinstance(data, Tensor) or data.ndim != 1 or data.numel() == 0:
            shape = tuple(getattr(data, "shape", ()))
            raise ConfigError(f"probs must be a 1-D Tensor[nc] of class probabilities, got "
                              f"{type(data).__name__} {shape}")
        self._data = data
        self._as_numpy = as_numpy

    def _out(self, t: Tensor) -> Any:
        return t.numpy() if self._as_numpy else t

    @property
    def data(self) -> Any:
        """(nc,) probabilities."""
        return self._out(self._data)

    @property
    def top1(self) -> int:
        """The most probable class id."""
        return int(self._data.argmax())

    @property
    def top5(self) -> list[int]:
        """The (up to) five most probable class ids, best first."""
        return self._data.topk(min(5, self._data.numel())).indices.tolist()

    @property
    def top1conf(self) -> Any:
        """Probability of :attr:`top1` (0-d)."""
        return self._out(self._data.max())

    @property
    def top5conf(self) -> Any:
        """Probabilities of :attr:`top5` (k,)."""
        return self._out(self._data.topk(min(5, self._data.numel())).values)

    @property
    def shape(self) -> tuple[int, ...]:
        return tuple(self._data.shape)

    def __len__(self) -> int:
        return int(self._data.numel())

    def cpu(self) -> Probs:
        return Probs(self._data.cpu(), as_numpy=self._as_numpy)

    def to(self, device: str | torch.device) -> Probs:
        return Probs(self._data.to(device), as_numpy=self._as_numpy)

    def numpy(self) -> Probs:
        return Probs(self._data.detach().cpu(), as_numpy=True)

    def tolist(self) -> list[float]:
        return self._data.tolist()

    def __repr__(self) -> str:
        return f"Probs(nc={len(self)}, top1={self.top1}, top1conf={float(self._data.max()):.4f})"


class Results:
    """What a model found in one image or video frame.

    Args:
        orig_img (np.ndarray[H, W, 3], uint8): the original image in BGR (OpenCV) order.
        path: the file it came from (``None`` for in-memory images).
        names: class id -> class name.
        boxes (Tensor[N, 6], float32, CPU): x1, y1, x2, y2, conf, cls in original-image pixels,
            or ``None`` for a task without boxes.
        probs (Tensor[nc], float32, CPU): class probabilities for classification, else ``None``.
        speed: milliseconds per image for ``preprocess``, ``inference``, ``postprocess``.
        frame: 0-based frame index for video frames, else ``None``.
    """

    def __init__(
        self,
        *,
        orig_img: np.ndarray,
        path: str | None = None,
        names: dict[int, str],
        boxes: Tensor | np.ndarray | None = None,
        probs: Tensor | np.ndarray | None = None,
        speed: dict[str, float] | None = None,
        frame: int | None = None,
    ) -> None:
        if not isinstance(orig_img, np.ndarray) or orig_img.ndim != 3 or orig_img.shape[2] != 3:
            shape = getattr(orig_img, "shape", None)
            raise ConfigError(f"orig_img must be a BGR uint8 array of shape (H, W, 3), got "
                              f"{type(orig_img).__name__} {shape}")
        self.orig_img = orig_img
        self.orig_shape: tuple[int, int] = (int(orig_img.shape[0]), int(orig_img.shape[1]))
        self.path = path
        self.names = dict(names)
        self.frame = frame
        self.speed: dict[str, float] = dict(speed or {})
        self.boxes: Boxes | None = Boxes(boxes, self.orig_shape) if boxes is not None else None
        self.probs: Probs | None = Probs(probs) if probs is not None else None
        self.save_path: Path | None = None  # the file the last save() wrote

    # ------------------------------------------------------------------ container
    def __len__(self) -> int:
        return len(self.boxes) if self.boxes is not None else 0

    def __getitem__(self, idx: Any) -> Results:
        """A Results holding only the selected detections, e.g. ``r[r.boxes.conf > 0.5]``."""
        if self.boxes is None:
            raise IndexError("this result has no detections to index")
        return self._with(boxes=self.boxes[idx]._data)

    def _with(self, **fields: Any) -> Results:
        kwargs: dict[str, Any] = {
            "orig_img": self.orig_img, "path": self.path, "names": self.names, "speed": self.speed,
            "frame": self.frame, "boxes": self.boxes._data if self.boxes is not None else None,
            "probs": self.probs._data if self.probs is not None else None,
        }
        kwargs.update(fields)
        return Results(**kwargs)

    # ------------------------------------------------------------------ text
    def counts(self) -> dict[str, int]:
        """Detections per class name, in class-id order."""
        if self.boxes is None or len(self.boxes) == 0:
            return {}
        ids = Counter(int(c) for c in self.boxes._data[:, 5].tolist())
        return {self.names.get(c, str(c)): ids[c] for c in sorted(ids)}

    def verbose(self) -> str:
        """A short description, e.g. ``"2 circles, 1 square"`` or ``"no detections"``; for
        classification the top-5, e.g. ``"circle 0.91, square 0.05, ..."``."""
        if self.probs is not None and self.boxes is None:
            p = self.probs
            return ", ".join(f"{self.names.get(c, str(c))} {float(p._data[c]):.2f}" for c in p.top5)
        counts = self.counts()
        if not counts:
            return "no detections"
        return ", ".join(f"{n} {_plural(name) if n != 1 else name}" for name, n in counts.items())

    def summary(self, *, normalize: bool = False, decimals: int = 5) -> list[dict[str, Any]]:
        """One dict per detection: ``{name, class, confidence, box: {x1, y1, x2, y2}}``.

        With ``normalize=True`` box coordinates are divided by the image width/height. For
        classification: one dict per top-5 class, ``{name, class, confidence}``, best first.
        """
        if self.boxes is None:
            if self.probs is None:
                return []
            return [{"name": self.names.get(c, str(c)), "class": c,
                     "confidence": round(float(self.probs._data[c]), decimals)} for c in self.probs.top5]
        h, w = self.orig_shape
        out = []
        for x1, y1, x2, y2, conf, cls in self.boxes._data.tolist():
            if normalize:
                x1, x2, y1, y2 = x1 / w, x2 / w, y1 / h, y2 / h
            c = int(cls)
            out.append({
                "name": self.names.get(c, str(c)),
                "class": c,
                "confidence": round(conf, decimals),
                "box": {"x1": round(x1, decimals), "y1": round(y1, decimals),
                        "x2": round(x2, decimals), "y2": round(y2, decimals)},
            })
        return out

    def to_json(self, *, normalize: bool = False, decimals: int = 5) -> str:
        """:meth:`summary` as a JSON string."""
        return json.dumps(self.summary(normalize=normalize, decimals=decimals), indent=2)

    def __repr__(self) -> str:
        where = repr(self.path) + (f", frame={self.frame}" if self.frame is not None else "")
        speed = ", ".join(f"{k}={v:.1f}ms" for k, v in self.speed.items())
        what = "top5" if self.boxes is None and self.probs is not None else f"{len(self)} detections"
        return (f"Results(path={where}, orig_shape={self.orig_shape}, {what}: "
                f"{self.verbose()}; speed: {speed or 'n/a'})")

    # ------------------------------------------------------------------ images
    def plot(self, *, labels: bool = True, conf: bool = True, line_width: int | None = None) -> np.ndarray:
        """The original image with boxes and labels drawn: BGR uint8 (H, W, 3), a new array.

        BGR like ``orig_img``, so ``cv2.imwrite("out.jpg", r.plot())`` keeps the colours; use
        ``r.plot()[..., ::-1]`` for PIL / matplotlib. Detections are drawn least confident first,
        so where labels overlap the most confident one is readable.

        Args:
            labels: draw class-name labels.
            conf: add the confidence to each label.
            line_width: outline thickness in pixels; ``None`` scales with the image size.
        """
        from .plotting import draw_detections

        if self.boxes is None and self.probs is not None:
            return self._plot_probs(conf=conf)
        if self.boxes is None or len(self.boxes) == 0:
            return self.orig_img.copy()
        d = self.boxes._data.detach().cpu().float().numpy()
        return draw_detections(self.orig_img, xyxy=d[:, :4], cls=d[:, 5], conf=d[:, 4] if conf else None,
                               names=self.names, labels=labels, line_width=line_width, order_by=d[:, 4])

    def _plot_probs(self, *, conf: bool) -> np.ndarray:
        """The image with the top-5 classes written in its top-left corner, best first."""
        import cv2

        img = np.ascontiguousarray(self.orig_img.copy())
        h = img.shape[0]
        scale = max(0.4, h / 800)
        th = max(1, round(scale * 2))
        y = int(22 * scale) + 4
        for c in self.probs.top5 if self.probs is not None else []:
            text = self.names.get(c, str(c)) + (f" {float(self.probs._data[c]):.2f}" if conf else "")
            (tw, tht), base = cv2.getTextSize(text, cv2.FONT_HERSHEY_SIMPLEX, scale, th)
            cv2.rectangle(img, (4, y - tht - 3), (8 + tw, y + base), (0, 0, 0), -1)
            cv2.putText(img, text, (6, y), cv2.FONT_HERSHEY_SIMPLEX, scale, (255, 255, 255), th, cv2.LINE_AA)
            y += tht + base + 6
        return img

    def save(self, target: str | Path, *, labels: bool = True, conf: bool = True,
             line_width: int | None = None) -> Path:
        """Write the annotated image and return the file written.

        ``target`` is a file (its suffix picks the format: .jpg, .png, .bmp, .webp, .tif) or a
        directory (created if needed); in a directory the file is named after the source
        (``bus.jpg``, ``clip_000012.jpg`` for frame 12 of ``clip.mp4``, ``image0.jpg`` for
        in-memory images, numbered so that they never overwrite one another).
        """
        import cv2

        target = Path(target)
        suffix = target.suffix.lower()
        if suffix in WRITABLE_SUFFIXES and not target.is_dir():
            file = target
        elif suffix in _UNWRITABLE_SUFFIXES and not target.is_dir():
            raise ConfigError(
                f"cannot save to '{target}': '{suffix}' is not a format save() writes; "
                f"use one of {', '.join(WRITABLE_SUFFIXES)} or a directory"
            )
        else:  # a directory, even with a dot in its name (runs/exp.1)
            file = self._file_in(target)
        file.parent.mkdir(parents=True, exist_ok=True)
        bgr = self.plot(labels=labels, conf=conf, line_width=line_width)  # BGR, what imencode expects
        params = [cv2.IMWRITE_JPEG_QUALITY, 95] if file.suffix.lower() in (".jpg", ".jpeg") else []
        ok, buf = cv2.imencode(file.suffix.lower(), bgr, params)
        if not ok:
            raise ConfigError(f"OpenCV could not encode an image as '{file.suffix}' for '{file}'")
        try:
            buf.tofile(str(file))  # handles non-ASCII paths, unlike cv2.imwrite
        except OSError as e:
            raise ConfigError(f"cannot write '{file}': {e}") from e
        logger.debug("saved %s", file)
        self.save_path = file
        return file

    def _file_in(self, folder: Path) -> Path:
        if self.path is not None:
            src = Path(self.path)
            if self.frame is not None:
                return folder / f"{src.stem}_{self.frame:06d}.jpg"
            suffix = src.suffix.lower() if src.suffix.lower() in WRITABLE_SUFFIXES else ".jpg"
            return folder / f"{src.stem}{suffix}"
        i = 0
        while (folder / f"image{i}.jpg").exists():
            i += 1
        return folder / f"image{i}.jpg"


def _plural(word: str) -> str:
    if word.endswith(("s", "x", "z", "ch", "sh")):
        return word + "es"
    if len(word) > 1 and word.endswith("y") and word[-2] not in "aeiou":
        return word[:-1] + "ies"
    return word + "s"


def next_run_dir(base: str | Path) -> Path:
    """Create and return the first free run folder: ``base``, then ``base2``, ``base3``...

    Example: ``next_run_dir(Path("runs/detect/predict"))`` -> ``runs/detect/predict2`` when
    ``runs/detect/predict`` exists. Creation is atomic, so two processes never share a folder.
    """
    base = Path(base)
    base.parent.mkdir(parents=True, exist_ok=True)
    n = 1
    while True:
        candidate = base if n == 1 else base.with_name(f"{base.name}{n}")
        try:
            candidate.mkdir()
            return candidate
        except FileExistsError:
            n += 1
