"""Instance-segmentation datasets: images with Ultralytics polygon labels, and ``shapes-seg``.

Layout and yaml as for detection (:mod:`libreyolo.data.config`): ``images/<split>/x.jpg`` with
``labels/<split>/x.txt``. Each non-blank label line is one instance, ``cls x1 y1 x2 y2 ...``: an
integer class id and at least three polygon points, coordinates normalised by the image width and
height (in [0, 1]). A malformed line (odd coordinate count, fewer than three points, a value
outside [0, 1], a non-number, a class id outside ``0..nc-1``) raises a one-line
:class:`~libreyolo.errors.DatasetError` naming the file and the line. A missing label file is an
image without instances.

An item: ``img`` Tensor[3, S, S] uint8 RGB (letterboxed; training: randomly scaled, placed,
cropped, flipped, colour-jittered), ``cls`` Tensor[n] int64, ``bboxes`` Tensor[n, 4] float32
(cx, cy, w, h normalised to S), ``masks`` Tensor[n, S / 4, S / 4] uint8 (0/1), plus ``ori_shape``,
``ratio_pad``, ``im_file``. A vertex ``(x, y)`` times the image size is a pixel centre (the
convention of OpenCV's contours and fills: ``shapes-seg`` traces its polygons that way). The
polygons go through the same scaling and placement as the pixels and are rasterised on the S x S
canvas; flips then move the rasters with the pixels; each box is the tight box of its rasterised
mask, so boxes and masks agree after every transform, and an instance cut away entirely is dropped. The mask is the
full-resolution raster averaged over 4 x 4 cells and thresholded at one half. Training may also
build 2 x 2 mosaics (``mosaic``, switched off by the trainer for the last ``close_mosaic`` epochs);
mixup and the random affine (rotation, shear, perspective) are not applied to this task.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import numpy as np
import torch

from .._cv import cv2
from ..errors import ConfigError, DatasetError
from .labels import label_path
from .seeded import SeededDataset

MASK_RATIO = 4
BUILTIN_SEG = ("shapes-seg",)
_SHIFT = 4  # sub-pixel bits of the polygon raster


def parse_polygon_file(path: Path, *, nc: int) -> list[tuple[int, np.ndarray]]:
    """(class id, ndarray[k, 2] float64 normalised x, y) per line of a polygon label file.

    Example:
        >>> import tempfile; f = Path(tempfile.mkdtemp()) / "a.txt"
        >>> _ = f.write_text("1 0.1 0.1 0.5 0.1 0.3 0.4\\n")
        >>> [(c, p.shape) for c, p in parse_polygon_file(f, nc=2)]
        [(1, (3, 2))]
        >>> _ = f.write_text("1 0.1 0.1 0.5 0.1 0.3\\n")
        >>> parse_polygon_file(f, nc=2)
        Traceback (most recent call last):
        ...
        libreyolo.errors.DatasetError: ...a.txt line 1: odd number of coordinates (5); write 'cls x1 y1 x2 y2 ...' with x, y pairs
    """
    try:
        text = Path(path).read_text(encoding="utf-8")
    except FileNotFoundError:
        return []
    except (OSError, UnicodeDecodeError) as e:
        raise DatasetError(f"label file {path} cannot be read: {e}") from e
    out: list[tuple[int, np.ndarray]] = []
    for n, line in enumerate(text.splitlines(), start=1):
        fields = line.split()
        if not fields:
            continue
        where = f"{path} line {n}"
        try:
            values = [float(v) for v in fields]
        except ValueError:
            raise DatasetError(f"{where}: {line.strip()!r} holds a non-number; write 'cls x1 y1 x2 y2 ...'") from None
        cls, coords = values[0], values[1:]
        if cls != int(cls) or not 0 <= cls < nc:
            raise DatasetError(f"{where}: class id {fields[0]} is not an integer in [0, {nc}) (the dataset has {nc} "
                               "classes)")
        if len(coords) % 2:
            raise DatasetError(f"{where}: odd number of coordinates ({len(coords)}); write 'cls x1 y1 x2 y2 ...' "
                               "with x, y pairs")
        if len(coords) < 6:
            raise DatasetError(f"{where}: a polygon needs at least 3 points, got {len(coords) // 2}")
        bad = [v for v in coords if not 0.0 <= v <= 1.0]
        if bad:
            raise DatasetError(f"{where}: coordinate {bad[0]:g} is outside [0, 1]; polygon coordinates are "
                               "normalised by the image width and height")
        out.append((int(cls), np.asarray(coords, np.float64).reshape(-1, 2)))
    return out


def rasterise(polygons: list[np.ndarray], size: int) -> np.ndarray:
    """ndarray[n, size, size] uint8 (0/1): each polygon (ndarray[k, 2] pixel x, y) filled on its
    own canvas (sub-pixel vertices; parts outside the canvas clipped).

    Example:
        >>> int(rasterise([np.array([[0.0, 0.0], [4.0, 0.0], [4.0, 4.0], [0.0, 4.0]])], 8)[0].sum())
        25
    """
    out = np.zeros((len(polygons), size, size), np.uint8)
    k = 1 << _SHIFT
    for i, poly in enumerate(polygons):
        pts = np.round(np.asarray(poly, np.float64) * k).astype(np.int64)
        pts = np.clip(pts, -(1 << 20), 1 << 20).astype(np.int32)
        cv2.fillPoly(out[i], [pts], 1, cv2.LINE_8, shift=_SHIFT)
    return out


def masks_and_boxes(polygons: list[np.ndarray], cls: list[int], size: int) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Rasterise on the ``size`` canvas: (masks ndarray[n, size / 4, size / 4] uint8, boxes
    ndarray[n, 4] float32 x1, y1, x2, y2 pixels tight around each full-resolution raster, classes
    ndarray[n] int64); instances without a pixel on the canvas are left out."""
    return from_rasters(rasterise(polygons, size), cls)


def from_rasters(full: np.ndarray, cls: list[int]) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """:func:`masks_and_boxes` from full-resolution rasters (ndarray[n, S, S] uint8 0/1)."""
    size = int(full.shape[1]) if full.ndim == 3 else 0
    keep = full.reshape(len(full), -1).any(1) if len(full) else np.zeros(0, bool)
    full = full[keep]
    boxes = np.zeros((len(full), 4), np.float32)
    for i, m in enumerate(full):
        ys, xs = np.nonzero(m)
        boxes[i] = (xs.min(), ys.min(), xs.max() + 1, ys.max() + 1)
    s4 = size // MASK_RATIO
    small = full.reshape(len(full), s4, MASK_RATIO, s4, MASK_RATIO).mean((2, 4)) >= 0.5
    return small.astype(np.uint8), boxes, np.asarray(cls, np.int64)[keep]


class SegmentDataset(SeededDataset):
    """Image files with polygon labels -> items (module docstring).

    Args:
        files: image paths (a :class:`~libreyolo.data.config.DataConfig` split).
        imgsz: side ``S`` of the square items (a multiple of 4).
        nc: number of classes (label lines are checked against it).
        augment: the training transform (True) or the letterbox (False).
        scale: range of the random scale factor; fliplr, flipud: flip probabilities; hsv_h, hsv_s,
            hsv_v: colour jitter gains (training).
        mosaic: probability that a training item is a 2 x 2 mosaic of four images (this one and
            three random others around a random centre on a 2S canvas, halved to S), until
            :meth:`close_mosaic`.
    """

    def __init__(self, files: list[Path], *, imgsz: int, nc: int, augment: bool = False,
                 scale: tuple[float, float] = (0.5, 1.5), fliplr: float = 0.5, flipud: float = 0.0,
                 hsv_h: float = 0.015, hsv_s: float = 0.7, hsv_v: float = 0.4, mosaic: float = 0.0,
                 prefix: str = "") -> None:
        if isinstance(imgsz, bool) or not isinstance(imgsz, int) or imgsz < 8 or imgsz % MASK_RATIO:
            raise ConfigError(f"imgsz must be an int >= 8 and a multiple of {MASK_RATIO}, got {imgsz!r}")
        self.files = [Path(f) for f in files]
        self.imgsz, self.nc, self.augment, self.prefix = imgsz, int(nc), augment, prefix
        self.scale, self.flips, self.hsv, self.mosaic = scale, (fliplr, flipud), (hsv_h, hsv_s, hsv_v), float(mosaic)
        # epoch, seed, mosaic on (shared memory: reaches the loader's workers)
        self._init_state(int(augment and self.mosaic > 0))

    # the trainer's dataset interface (SeededDataset), with mosaic
    @property
    def mosaic_enabled(self) -> bool:
        return bool(self._state[2])

    def close_mosaic(self) -> None:
        """Stop building mosaics (the trainer calls it for the last ``close_mosaic`` epochs)."""
        self._state[2] = 0

    def __len__(self) -> int:
        return len(self.files)

    def _load(self, i: int) -> tuple[np.ndarray, list[np.ndarray], list[int]]:
        """(RGB image, polygons in pixel-edge coordinates (vertex = pixel centre + 0.5), classes)."""
        f = self.files[i]
        bgr = cv2.imread(str(f), cv2.IMREAD_COLOR)
        if bgr is None:
            raise DatasetError(f"{self.prefix}image {f} could not be read (missing or not an image)")
        img = cv2.cvtColor(bgr, cv2.COLOR_BGR2RGB)
        h, w = img.shape[:2]
        labels = parse_polygon_file(label_path(f), nc=self.nc)
        return img, [p * (w, h) + 0.5 for _, p in labels], [c for c, _ in labels]

    @staticmethod
    def _paste(canvas: np.ndarray, img: np.ndarray, polys: list[np.ndarray], r: float, ox: int,
               oy: int) -> list[np.ndarray]:
        """Resize ``img`` by ``r``, paste it with its top-left corner at (ox, oy) (clipped to the
        canvas); the polygons, moved the same way."""
        h, w = img.shape[:2]
        nh, nw = max(1, int(round(h * r))), max(1, int(round(w * r)))
        resized = cv2.resize(img, (nw, nh), interpolation=cv2.INTER_LINEAR) if (nh, nw) != (h, w) else img
        H, W = canvas.shape[:2]
        x0, y0, x1, y1 = max(ox, 0), max(oy, 0), min(ox + nw, W), min(oy + nh, H)
        if x1 > x0 and y1 > y0:
            canvas[y0:y1, x0:x1] = resized[y0 - oy:y1 - oy, x0 - ox:x1 - ox]
        return [p * (nw / w, nh / h) + (ox, oy) for p in polys]

    def _mosaic(self, i: int, rng: np.random.Generator) -> tuple[np.ndarray, list[np.ndarray], list[int]]:
        s = self.imgsz
        big = np.full((2 * s, 2 * s, 3), 114, np.uint8)
        xc, yc = (int(v) for v in rng.integers(s // 2, 3 * s // 2 + 1, 2))
        picks = [i, *(int(v) for v in rng.integers(0, len(self.files), 3))]
        polys: list[np.ndarray] = []
        cls: list[int] = []
        for k, j in enumerate(picks):
            img, p, c = self._load(j)
            h, w = img.shape[:2]
            r = s / max(h, w) * rng.uniform(*self.scale)
            nh, nw = max(1, int(round(h * r))), max(1, int(round(w * r)))
            ox, oy = (xc - nw if k in (0, 2) else xc), (yc - nh if k in (0, 1) else yc)
            polys += self._paste(big, img, p, r, ox, oy)
            cls += c
        canvas = cv2.resize(big, (s, s), interpolation=cv2.INTER_AREA)
        return canvas, [p * 0.5 for p in polys], cls

    def __getitem__(self, i: int) -> dict[str, Any]:
        s = self.imgsz
        img, polys, cls = self._load(i)
        h, w = img.shape[:2]
        rng = self._rng(i) if self.augment else None
        r = s / max(h, w) * (rng.uniform(*self.scale) if rng is not None else 1.0)
        nh, nw = max(1, int(round(h * r))), max(1, int(round(w * r)))
        if rng is None:  # letterbox: centred, grey padding
            ox, oy = (s - nw) // 2, (s - nh) // 2
        else:  # random placement on (or crop of) the S x S canvas
            ox = int(rng.integers(min(0, s - nw), max(0, s - nw) + 1))
            oy = int(rng.integers(min(0, s - nh), max(0, s - nh) + 1))
        if rng is not None and self.mosaic_enabled and rng.random() < self.mosaic:
            canvas, polys, cls = self._mosaic(i, rng)
        else:
            canvas = np.full((s, s, 3), 114, np.uint8)
            polys = self._paste(canvas, img, polys, r, ox, oy)
        full = rasterise([p - 0.5 for p in polys], s)
        if rng is not None:  # flips move the rasters with the pixels
            from .augment import hsv_jitter

            canvas = hsv_jitter(canvas, rng, h=self.hsv[0], s=self.hsv[1], v=self.hsv[2])
            if rng.random() < self.flips[0]:
                canvas, full = canvas[:, ::-1], full[:, :, ::-1]
            if rng.random() < self.flips[1]:
                canvas, full = canvas[::-1], full[:, ::-1]
        masks, boxes, classes = from_rasters(np.ascontiguousarray(full), cls)
        xywh = np.concatenate(((boxes[:, :2] + boxes[:, 2:]) / 2, boxes[:, 2:] - boxes[:, :2]), 1) / s
        return {"img": torch.from_numpy(np.ascontiguousarray(canvas)).permute(2, 0, 1).contiguous(),
                "cls": torch.from_numpy(classes), "bboxes": torch.from_numpy(xywh.astype(np.float32)),
                "masks": torch.from_numpy(masks), "ori_shape": (h, w), "ratio_pad": ((nw / w, nh / h), (ox, oy)),
                "im_file": str(self.files[i])}


def collate_segment(items: list[dict[str, Any]]) -> dict[str, Any]:
    """Stack items: ``img`` Tensor[B, 3, S, S] uint8, ``batch_idx`` Tensor[N] (image of each
    instance, images in order), ``cls`` Tensor[N], ``bboxes`` Tensor[N, 4], ``masks``
    Tensor[N, S / 4, S / 4] uint8; ``ori_shape``, ``ratio_pad``, ``im_file`` as lists."""
    if not items:
        raise ValueError("collate_segment got an empty list of items")
    counts = torch.tensor([int(it["cls"].shape[0]) for it in items], dtype=torch.int64)
    return {"img": torch.stack([it["img"] for it in items]),
            "batch_idx": torch.repeat_interleave(torch.arange(len(items), dtype=torch.int64), counts),
            "cls": torch.cat([it["cls"] for it in items]), "bboxes": torch.cat([it["bboxes"] for it in items]),
            "masks": torch.cat([it["masks"] for it in items]),
            **{k: [it[k] for it in items] for k in ("ori_shape", "ratio_pad", "im_file")}}


def load_segment_data(data: str | Path) -> Any:
    """The dataset description (a :class:`~libreyolo.data.config.DataConfig`) of a segmentation
    dataset yaml, or of ``"shapes-seg"`` (generated on first use).

    Example:
        >>> import tempfile; from libreyolo.data.shapes_seg import ensure_shapes_seg_dataset
        >>> cfg = load_segment_data(ensure_shapes_seg_dataset(Path(tempfile.mkdtemp()), n_train=2, n_val=1, imgsz=64))
        >>> cfg.nc, len(cfg.train), len(cfg.val)
        (6, 2, 1)
    """
    from .config import load_data_config

    if isinstance(data, str) and data in BUILTIN_SEG:
        from .shapes_seg import ensure_shapes_seg_dataset

        data = str(ensure_shapes_seg_dataset())
    return load_data_config(data)
