"""Prediction results: :class:`Results` for one image or frame, :class:`Boxes` for its detections.

Tensor contract: ``Results.boxes.data`` is ``Tensor[N, 6]`` float32 on CPU, one row per
detection: x1, y1, x2, y2 (pixels of the original image), confidence, class id.

Colours: ``orig_img`` is BGR (OpenCV order) and so is what :meth:`Results.plot` returns, so
``cv2.imwrite(path, r.plot())`` and ``cv2.imshow`` show true colours; for PIL or matplotlib use
``r.plot()[..., ::-1]`` (RGB). The full convention is in :mod:`libreyolo.engine.sources`.

Task-specific fields are optional keyword arguments of :class:`Results` that default to
``None`` (``boxes``; ``probs``, a :class:`Probs` of Tensor[nc] class probabilities, for classification;
``semantic``, Tensor[H, W] int64 class ids, for semantic segmentation; ``depth``, Tensor[H, W]
float32, for depth; ``points``, Tensor[n, 4] float32 ``x, y, conf, cls`` object centroids, for the
point task; ``restored``, the restored image Tensor[3, H', W'], for restoration; ``masks``, a
:class:`~libreyolo.engine.masks.Masks` of Tensor[N, H, W] bool, beside ``boxes`` for instance
segmentation; ``keypoints``, a :class:`~libreyolo.engine.keypoints.Keypoints` of Tensor[N, K, 3],
beside ``boxes`` for pose); a new task adds its own
the same way, and the methods skip the fields a result does not have.

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
from pathlib import Path
from typing import Any

import numpy as np
import torch
from torch import Tensor

from ..errors import ConfigError
from . import depth_io
from .boxes import Boxes, Probs
from .results_io import _plural, _same_file, next_run_dir, write_bgr  # noqa: F401 - re-exported (saving, tests)
from .results_kinds import check_maps, kind_plot, kind_summary, kind_verbose
from .results_maps import MapsMixin

logger = logging.getLogger(__name__)

WRITABLE_SUFFIXES = (".jpg", ".jpeg", ".png", ".bmp", ".webp", ".tif", ".tiff")
# file types a user may ask for that save() cannot write (anything else names a directory)
_UNWRITABLE_SUFFIXES = frozenset({".gif", ".svg", ".heic", ".heif", ".avif", ".ico", ".jp2", ".pdf", ".eps",
                                  ".mp4", ".avi", ".mov", ".mkv", ".webm", ".json", ".txt"})


class Results(MapsMixin):
    """What a model found in one image or video frame.

    Args:
        orig_img (np.ndarray[H, W, 3], uint8): the original image in BGR (OpenCV) order.
        path: the file it came from (``None`` for in-memory images).
        names: class id -> class name.
        boxes (Tensor[N, 6], float32, CPU): x1, y1, x2, y2, conf, cls in original-image pixels,
            or ``None`` for a task without boxes; a :class:`Boxes` (e.g. with track ids) is kept as is.
        probs (Tensor[nc], float32, CPU): class probabilities for classification, else ``None``.
        semantic (Tensor[H, W], int64, CPU): a class id per original-image pixel for semantic
            segmentation, else ``None`` (:mod:`libreyolo.engine.semantic_io`: overlay, summary, PNG).
        depth (Tensor[H, W], float32, CPU): depth per original-image pixel (:mod:`.depth_io`), else ``None``.
        depth_kind: what ``depth`` holds, one of :data:`.depth_io.DEPTH_KINDS` (``"disparity"``: larger =
            nearer, the default; ``"depth"`` / ``"metric"`` / ``"metres"``: larger = farther).
        points (Tensor[n, 4], float32, CPU): centroids x, y, conf, cls (:mod:`.points_io`), else ``None``.
        masks (Tensor[N, H, W] bool, CPU): one mask per box for instance segmentation, else
            ``None`` (:mod:`libreyolo.engine.masks`: polygons, overlay, ``segments`` in summary).
        keypoints (Tensor[N, K, 3] float32, CPU): x, y (pixels), visibility score per keypoint of
            each box for pose, or ``{"data": ..., "skeleton": [[i, j], ...]}``, else ``None``
            (:mod:`libreyolo.engine.keypoints`: drawn with the skeleton, ``keypoints`` in summary).
        speed: milliseconds per image for ``preprocess``, ``inference``, ``postprocess``.
        frame: 0-based frame index for video frames, else ``None``.

    The methods' examples build a result by hand; ``model.predict`` returns them filled in.

    Example:
        >>> r = LibreYOLO("LibreYOLO9t.pt")(SAMPLE_IMAGE)[0]
        >>> r.orig_shape, r.path == SAMPLE_IMAGE, r.names[0], len(r) == len(r.boxes) > 0
        ((480, 640), True, 'circle', True)
        >>> sure = r[r.boxes.conf > 0.5]  # a Results with only those boxes
        >>> bool((sure.boxes.conf > 0.5).all())
        True
    """

    def __init__(
        self,
        *,
        orig_img: np.ndarray,
        path: str | None = None,
        names: dict[int, str],
        boxes: Tensor | np.ndarray | Boxes | None = None,
        probs: Tensor | np.ndarray | Probs | None = None,
        semantic: Tensor | np.ndarray | None = None,
        depth: Tensor | np.ndarray | None = None,
        depth_kind: str | None = None,
        alpha: Tensor | np.ndarray | None = None,  # matte: :mod:`.matte_io`
        points: Tensor | np.ndarray | None = None,
        restored: Tensor | np.ndarray | None = None,  # restoration: :mod:`.restore_io`
        masks: Any = None,
        keypoints: Any = None,
        prompts: dict[str, Any] | None = None,  # prompt task: :mod:`.prompts_io`
        texts: Any = None,  # ocr task: a :class:`~.ocr_io.Texts`
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
        self.boxes: Boxes | None = None
        self.probs: Probs | None = None
        self.semantic: Tensor | np.ndarray | None = None
        self.depth: Tensor | np.ndarray | None = None
        self.depth_kind: str | None = depth_io.check_depth_kind(depth_kind)  # None: disparity
        self.alpha: Tensor | np.ndarray | None = None
        self.points: Tensor | None = None
        self.restored: Tensor | None = None
        self.masks: Any = None  # a libreyolo.engine.masks.Masks
        self.keypoints: Any = None  # a libreyolo.engine.keypoints.Keypoints
        self.prompts: dict[str, Any] | None = prompts  # points / labels / boxes in original pixels
        self.texts: Any = None  # a libreyolo.engine.ocr_io.Texts
        self.update(boxes=boxes, probs=probs, semantic=semantic, depth=depth, alpha=alpha, points=points,
                    restored=restored, masks=masks, keypoints=keypoints, texts=texts)
        self.save_path: Path | None = None  # the file the last save() wrote
        self.depth_path: Path | None = None  # the file the last save_depth() wrote
        self.alpha_path: Path | None = None  # the mask PNG the last save_alpha() wrote

    def update(self, *, boxes: Tensor | np.ndarray | Boxes | None = None,
               probs: Tensor | np.ndarray | Probs | None = None,
               semantic: Tensor | np.ndarray | None = None, depth: Tensor | np.ndarray | None = None,
               alpha: Tensor | np.ndarray | None = None,
               points: Tensor | np.ndarray | None = None, restored: Tensor | np.ndarray | None = None,
               masks: Any = None, keypoints: Any = None, texts: Any = None) -> Results:
        """Replace the given fields in place (the others are kept) and return ``self``.

        Example:
            >>> r = Results(orig_img=np.zeros((8, 8, 3), np.uint8), names={0: "a"})
            >>> len(r.update(boxes=torch.tensor([[0.0, 0.0, 4.0, 4.0, 0.9, 0.0]])))
            1
        """
        if boxes is not None:
            if isinstance(boxes, Boxes):
                if boxes.orig_shape != self.orig_shape:
                    raise ConfigError(f"boxes refer to an image of shape {boxes.orig_shape}, this result's "
                                      f"image is {self.orig_shape}")
                self.boxes = boxes
            else:
                self.boxes = Boxes(boxes, self.orig_shape)
        if probs is not None:
            self.probs = probs if isinstance(probs, Probs) else Probs(probs)
        checked = check_maps(self.orig_shape, semantic=semantic, depth=depth, alpha=alpha, points=points,
                             restored=restored, masks=masks, keypoints=keypoints, texts=texts)
        for name, value in checked.items():  # the map fields given, validated (results_kinds.check_maps)
            setattr(self, name, value)
        return self

    # ------------------------------------------------------------------ container
    def __len__(self) -> int:
        if self.boxes is None and (self.points is not None or self.texts is not None):
            return len(self.points if self.points is not None else self.texts)
        return len(self.boxes) if self.boxes is not None else 0

    def __getitem__(self, idx: Any) -> Results:
        """A Results holding only the selected detections, e.g. ``r[r.boxes.conf > 0.5]``.

        Example:
            >>> r = Results(orig_img=np.zeros((64, 128, 3), np.uint8), path="bus.jpg", names={0: "circle"}, boxes=torch.tensor([[16, 32, 48, 64, 0.75, 0]]))
            >>> len(r[r.boxes.conf > 0.5]), len(r[r.boxes.conf > 0.8]), len(r[0])
            (1, 0, 1)
        """
        if self.boxes is None and self.points is not None:  # points: the selected rows
            return self._with(points=self.points[idx].reshape(-1, 4))
        if self.boxes is None:
            raise IndexError("this result has no detections to index")
        return self._with(boxes=self.boxes[idx], masks=self.masks[idx] if self.masks is not None else None,
                          keypoints=self.keypoints[idx] if self.keypoints is not None else None)

    def _with(self, **fields: Any) -> Results:
        kwargs: dict[str, Any] = {
            "orig_img": self.orig_img, "path": self.path, "names": self.names, "speed": self.speed,
            "frame": self.frame, "boxes": self.boxes, "probs": self.probs, "semantic": self.semantic,
            "depth": self.depth, "depth_kind": self.depth_kind, "alpha": self.alpha, "points": self.points,
            "restored": self.restored, "masks": self.masks, "keypoints": self.keypoints, "texts": self.texts,
        }
        kwargs.update(fields)
        return Results(**kwargs)

    def new(self) -> Results:
        """A result for the same image (path, names, speed, frame) with no detections or probabilities.

        Example:
            >>> r = Results(orig_img=np.zeros((64, 128, 3), np.uint8), path="bus.jpg", names={0: "circle"}, boxes=torch.tensor([[16, 32, 48, 64, 0.75, 0]]))
            >>> r.new().path, len(r.new()), r.new().boxes is None
            ('bus.jpg', 0, True)
        """
        return Results(orig_img=self.orig_img, path=self.path, names=self.names, speed=self.speed,
                       frame=self.frame)

    def cpu(self) -> Results:
        """A copy whose boxes/probs tensors are on the CPU (the image is shared).

        Example:
            >>> r = Results(orig_img=np.zeros((64, 128, 3), np.uint8), path="bus.jpg", names={0: "circle"}, boxes=torch.tensor([[16, 32, 48, 64, 0.75, 0]]))
            >>> r.cpu().boxes.data.device
            device(type='cpu')
        """
        return self._with(boxes=self.boxes.cpu() if self.boxes is not None else None,
                          probs=self.probs.cpu() if self.probs is not None else None,
                          **self._maps(lambda t: torch.as_tensor(t).cpu()))

    def numpy(self) -> Results:
        """A copy whose ``boxes`` / ``probs`` properties return numpy arrays.

        Example:
            >>> r = Results(orig_img=np.zeros((64, 128, 3), np.uint8), path="bus.jpg", names={0: "circle"}, boxes=torch.tensor([[16, 32, 48, 64, 0.75, 0]]))
            >>> r.numpy().boxes.xyxy
            array([[16., 32., 48., 64.]], dtype=float32)
        """
        return self._with(boxes=self.boxes.numpy() if self.boxes is not None else None,
                          probs=self.probs.numpy() if self.probs is not None else None,
                          **self._maps(lambda t: torch.as_tensor(t).cpu().numpy()))

    def to(self, device: str | torch.device) -> Results:
        """A copy whose boxes/probs tensors are on ``device``.

        Example:
            >>> r = Results(orig_img=np.zeros((64, 128, 3), np.uint8), path="bus.jpg", names={0: "circle"}, boxes=torch.tensor([[16, 32, 48, 64, 0.75, 0]]))
            >>> r.to("cpu").boxes.conf.device.type
            'cpu'
        """
        return self._with(boxes=self.boxes.to(device) if self.boxes is not None else None,
                          masks=self.masks.to(device) if self.masks is not None else None,
                          keypoints=self.keypoints.to(device) if self.keypoints is not None else None,
                          probs=self.probs.to(device) if self.probs is not None else None,
                          **self._maps(lambda t: torch.as_tensor(t).to(device)))

    # ------------------------------------------------------------------ text
    def counts(self) -> dict[str, int]:
        """Detections per class name, in class-id order.

        Example:
            >>> r = Results(orig_img=np.zeros((64, 128, 3), np.uint8), path="bus.jpg", names={0: "circle"}, boxes=torch.tensor([[16, 32, 48, 64, 0.75, 0]]))
            >>> r.counts()
            {'circle': 1}
        """
        if self.boxes is None or len(self.boxes) == 0:
            return {}
        ids = Counter(int(c) for c in self.boxes._data[:, 5].tolist())
        return {self.names.get(c, str(c)): ids[c] for c in sorted(ids)}

    def verbose(self) -> str:
        """A short description, e.g. ``"2 circles, 1 square"`` or ``"no detections"``; for
        classification the top-5, e.g. ``"circle 0.91, square 0.05, ..."``.

        Example:
            >>> r = Results(orig_img=np.zeros((64, 128, 3), np.uint8), path="bus.jpg", names={0: "circle"}, boxes=torch.tensor([[16, 32, 48, 64, 0.75, 0]]))
            >>> r.verbose(), r.new().verbose()
            ('1 circle', 'no detections')
        """
        text = kind_verbose(self)  # a depth / restored / semantic / points result
        if text is not None:
            return text
        if self.probs is not None and self.boxes is None:
            p = self.probs
            return ", ".join(f"{self.names.get(c, str(c))} {float(p._data[c]):.2f}" for c in p.top5)
        counts = self.counts()
        if not counts:
            return "no detections"
        return ", ".join(f"{n} {_plural(name) if n != 1 else name}" for name, n in counts.items())

    def summary(self, *, normalize: bool = False, decimals: int = 5) -> list[dict[str, Any]]:
        """One dict per detection: ``{name, class, confidence, box: {x1, y1, x2, y2}}``, plus
        ``track_id`` (int) when the boxes come from a tracker.

        With ``normalize=True`` box coordinates are divided by the image width/height. For
        classification: one dict per top-5 class, ``{name, class, confidence}``, best first; for
        semantic segmentation one per class present, ``{name, class, pixels, fraction}``, largest first.

        Example:
            >>> r = Results(orig_img=np.zeros((64, 128, 3), np.uint8), path="bus.jpg", names={0: "circle"}, boxes=torch.tensor([[16, 32, 48, 64, 0.75, 0]]))
            >>> r.summary(normalize=True)
            [{'name': 'circle', 'class': 0, 'confidence': 0.75, 'box': {'x1': 0.125, 'y1': 0.5, 'x2': 0.375, 'y2': 1.0}}]
        """
        rows = kind_summary(self, normalize=normalize, decimals=decimals)
        if rows is not None:
            return rows
        if self.boxes is None:
            if self.probs is None:
                return []
            return [{"name": self.names.get(c, str(c)), "class": c,
                     "confidence": round(float(self.probs._data[c]), decimals)} for c in self.probs.top5]
        h, w = self.orig_shape
        out = []
        ids = self.boxes._id.tolist() if self.boxes._id is not None else None
        for i, (x1, y1, x2, y2, conf, cls) in enumerate(self.boxes._data.tolist()):
            if normalize:
                x1, x2, y1, y2 = x1 / w, x2 / w, y1 / h, y2 / h
            c = int(cls)
            row: dict[str, Any] = {
                "name": self.names.get(c, str(c)),
                "class": c,
                "confidence": round(conf, decimals),
                "box": {"x1": round(x1, decimals), "y1": round(y1, decimals),
                        "x2": round(x2, decimals), "y2": round(y2, decimals)},
            }
            if ids is not None:
                row["track_id"] = int(ids[i])
            out.append(row)
        from .keypoints import add_keypoints
        from .masks import add_segments

        out = add_keypoints(self, out, normalize=normalize, decimals=decimals)
        return add_segments(self, out, normalize=normalize, decimals=decimals)

    def to_df(self, *, normalize: bool = False, decimals: int = 5) -> Any:
        """:meth:`summary` as a ``pandas.DataFrame``, one row per detection (box columns flattened:
        ``x1, y1, x2, y2``). Needs pandas (``pip install pandas``); :meth:`to_csv` does not.

        Example:
            >>> r = Results(orig_img=np.zeros((64, 128, 3), np.uint8), path="bus.jpg", names={0: "circle"}, boxes=torch.tensor([[16, 32, 48, 64, 0.75, 0]]))
            >>> r.to_df()[["name", "confidence", "x1", "y2"]].values.tolist()
            [['circle', 0.75, 16.0, 64.0]]
        """
        from .results_io import summary_to_df, table_kind

        return summary_to_df(self.summary(normalize=normalize, decimals=decimals), table_kind(self))

    def to_csv(self, path: str | Path | None = None, *, normalize: bool = False, decimals: int = 5) -> str:
        """:meth:`summary` as CSV text with a header row (the columns of :meth:`to_df`), also
        written to ``path`` when given. Works without pandas.

        Example:
            >>> r = Results(orig_img=np.zeros((64, 128, 3), np.uint8), path="bus.jpg", names={0: "circle"}, boxes=torch.tensor([[16, 32, 48, 64, 0.75, 0]]))
            >>> r.to_csv().splitlines()
            ['name,class,confidence,x1,y1,x2,y2', 'circle,0,0.75,16.0,32.0,48.0,64.0']
        """
        from .results_io import summary_to_csv, table_kind

        text = summary_to_csv(self.summary(normalize=normalize, decimals=decimals), table_kind(self))
        if path is not None:
            Path(path).parent.mkdir(parents=True, exist_ok=True)
            Path(path).write_text(text, encoding="utf-8")
        return text

    def to_json(self, *, normalize: bool = False, decimals: int = 5) -> str:
        """:meth:`summary` as a JSON string.

        Example:
            >>> r = Results(orig_img=np.zeros((64, 128, 3), np.uint8), path="bus.jpg", names={0: "circle"}, boxes=torch.tensor([[16, 32, 48, 64, 0.75, 0]]))
            >>> json.loads(r.to_json())[0]["box"]
            {'x1': 16.0, 'y1': 32.0, 'x2': 48.0, 'y2': 64.0}
        """
        return json.dumps(self.summary(normalize=normalize, decimals=decimals), indent=2)

    def __repr__(self) -> str:
        where = repr(self.path) + (f", frame={self.frame}" if self.frame is not None else "")
        speed = ", ".join(f"{k}={v:.1f}ms" for k, v in self.speed.items())
        what = ("restored image" if self.restored is not None else "alpha matte" if self.alpha is not None
                else "depth map" if self.depth is not None and self.boxes is None
                else "semantic map" if self.semantic is not None and self.boxes is None else "points"
                if self.points is not None and self.boxes is None else "top5"
                if self.boxes is None and self.probs is not None else f"{len(self)} detections")
        return (f"Results(path={where}, orig_shape={self.orig_shape}, {what}: "
                f"{self.verbose()}; speed: {speed or 'n/a'})")

    # ------------------------------------------------------------------ images
    def plot(self, *, labels: bool = True, conf: bool = True, line_width: int | None = None) -> np.ndarray:
        """The original image with boxes and labels drawn: BGR uint8 (H, W, 3), a new array.

        BGR like ``orig_img``, so ``cv2.imwrite("out.jpg", r.plot())`` keeps the colours; use
        ``r.plot()[..., ::-1]`` for PIL / matplotlib. A semantic result is blended with one colour per
        class (:func:`~libreyolo.engine.semantic_io.plot_semantic`). Detections are drawn least confident first,
        so where labels overlap the most confident one is readable. Tracked boxes
        (:attr:`Boxes.is_track`) are coloured by track id and labelled ``id:<n> <name>``.

        Args:
            labels: draw class-name labels.
            conf: add the confidence to each label.
            line_width: outline thickness in pixels; ``None`` scales with the image size.

        Example:
            >>> r = Results(orig_img=np.zeros((64, 128, 3), np.uint8), path="bus.jpg", names={0: "circle"}, boxes=torch.tensor([[16, 32, 48, 64, 0.75, 0]]))
            >>> img = r.plot(line_width=2)
            >>> img.shape, img.dtype, bool((img != r.orig_img).any())
            ((64, 128, 3), dtype('uint8'), True)
        """
        from .plotting import draw_detections

        drawn = kind_plot(self, labels=labels, conf=conf, line_width=line_width)
        if drawn is not None:
            return drawn
        if self.boxes is None and self.probs is not None:
            from .results_io import plot_probs

            return plot_probs(self, conf=conf)
        if self.boxes is None or len(self.boxes) == 0:
            return self.orig_img.copy()
        from .keypoints import draw_keypoints
        from .masks import overlay_masks

        d = self.boxes._data.detach().cpu().float().numpy()
        ids = self.boxes._id.detach().cpu().numpy() if self.boxes._id is not None else None
        drawn = draw_detections(overlay_masks(self, self.orig_img), xyxy=d[:, :4], cls=d[:, 5],
                                conf=d[:, 4] if conf else None, names=self.names, labels=labels,
                                line_width=line_width, order_by=d[:, 4], ids=ids)
        from .prompts_io import draw_prompts

        return draw_prompts(self, draw_keypoints(self, drawn, line_width=line_width), line_width=line_width)

    def save(self, target: str | Path | None = None, *, labels: bool = True, conf: bool = True,
             line_width: int | None = None) -> Path:
        """Write the annotated image and return the file written.

        ``target`` is a file (its suffix picks the format: .jpg, .png, .bmp, .webp, .tif) or a
        directory (created if needed); in a directory the file is named after the source
        (``bus.jpg``, ``clip_000012.jpg`` for frame 12 of ``clip.mp4``, ``image0.jpg`` for
        in-memory images, numbered so that they never overwrite one another). Without
        ``target`` the file goes to the current directory as ``results_<name>`` (e.g.
        ``results_bus.jpg``). The source image itself is never overwritten.

        Example:
            >>> import tempfile; out = Path(tempfile.mkdtemp())
            >>> r = Results(orig_img=np.zeros((8, 8, 3), np.uint8), path="bus.jpg", names={0: "a"})
            >>> r.save(out).name, r.save(out / "annotated.png").name, r.save_path.suffix
            ('bus.jpg', 'annotated.png', '.png')
        """
        from .results_io import save_result

        return save_result(self, target, labels=labels, conf=conf, line_width=line_width)

    def save_txt(self, file: str | Path, *, save_conf: bool = False) -> Path:
        """Write the detections as YOLO label lines ``cls xc yc w h [conf] [id]`` (normalised
        0..1 centre/size; ``conf`` with ``save_conf=True``; the track id when tracked), one per
        box, to ``file``; an empty file means no detections. With keypoints (pose) the line is the
        pose label format ``cls xc yc w h x1 y1 v1 ... [conf]`` (:func:`~.keypoints.keypoint_fields`). For classification: ``prob cls``
        lines of the top-5. Returns ``file``.

        Example:
            >>> r = Results(orig_img=np.zeros((64, 128, 3), np.uint8), path="bus.jpg", names={0: "circle"}, boxes=torch.tensor([[16, 32, 48, 64, 0.75, 0]]))
            >>> import tempfile; file = r.save_txt(Path(tempfile.mkdtemp()) / "bus.txt", save_conf=True)
            >>> file.read_text()
            '0 0.25 0.75 0.25 0.5 0.75\\n'
        """
        from .results_io import label_lines

        file = Path(file)
        if self.path is not None and _same_file(file, Path(self.path)):
            raise ConfigError(f"save_txt() would overwrite the source file '{self.path}'")
        file.parent.mkdir(parents=True, exist_ok=True)
        file.write_text("".join(line + "\n" for line in label_lines(self, save_conf=save_conf)), encoding="utf-8")
        return file

    def crops(self) -> list[tuple[int, np.ndarray]]:
        """(class id, BGR crop of ``orig_img``) per detection, boxes clipped to the image; empty
        boxes (zero width or height after clipping) are left out.

        Example:
            >>> r = Results(orig_img=np.zeros((64, 128, 3), np.uint8), path="bus.jpg", names={0: "circle"}, boxes=torch.tensor([[16, 32, 48, 64, 0.75, 0]]))
            >>> [(cls, crop.shape) for cls, crop in r.crops()]
            [(0, (32, 32, 3))]
        """
        from .results_io import crop_boxes

        return crop_boxes(self)

    def save_crop(self, save_dir: str | Path, *, file_name: str | Path | None = None) -> list[Path]:
        """Write each detection's crop as ``save_dir/<class name>/<file_name>.jpg`` (``_2``,
        ``_3``... when a name is taken; ``file_name`` defaults to the source stem or ``image``, an
        image suffix on it is dropped: ``"bus.jpg"`` writes ``bus.jpg``). Returns the files written.

        Example:
            >>> r = Results(orig_img=np.zeros((64, 128, 3), np.uint8), path="bus.jpg", names={0: "circle"}, boxes=torch.tensor([[16, 32, 48, 64, 0.75, 0]]))
            >>> import tempfile; out = Path(tempfile.mkdtemp())
            >>> [f.relative_to(out).as_posix() for f in r.save_crop(out)]
            ['circle/bus.jpg']
        """
        from .results_io import crop_stem, write_crops

        return write_crops(self, Path(save_dir), crop_stem(self, file_name))
