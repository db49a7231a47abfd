"""Instance-segmentation datasets: images with Ultralytics polygon labels, and ``shapes-seg``.

Layout and yaml as for detection (:mod:`libreyolo.data.config`): ``images/<split>/x.jpg`` with
``labels/<split>/x.txt``. Each non-blank label line is one instance, ``cls x1 y1 x2 y2 ...``: an
integer class id and at least three polygon points, coordinates normalised by the image width and
height (in [0, 1]). A malformed line (odd coordinate count, fewer than three points, a value
outside [0, 1], a non-number, a class id outside ``0..nc-1``) raises a one-line
:class:`~libreyolo.errors.DatasetError` naming the file and the line. A missing label file is an
image without instances.

An item: ``img`` Tensor[3, S, S] (``rect``: [3, H, W]) uint8 RGB (letterboxed; training: randomly scaled, placed,
cropped, flipped, colour-jittered), ``cls`` Tensor[n] int64, ``bboxes`` Tensor[n, 4] float32
(cx, cy, w, h normalised to S), ``masks`` Tensor[n, S / 4, S / 4] uint8 (0/1), plus ``ori_shape``,
``ratio_pad``, ``im_file``. A vertex ``(x, y)`` times the image size is a pixel centre (the
convention of OpenCV's contours and fills: ``shapes-seg`` traces its polygons that way). The
polygons go through the same scaling and placement as the pixels and are rasterised on the S x S
canvas; flips then move the rasters with the pixels; each box is the tight box of its rasterised
mask, so boxes and masks agree after every transform, and an instance cut away entirely is dropped. The mask is the
full-resolution raster averaged over 4 x 4 cells and thresholded at one half. Training may also
build 2 x 2 mosaics (``mosaic``, switched off by the trainer for the last ``close_mosaic`` epochs),
blend a mosaic with a second one (``mixup``: pixels weighted ~ Beta(32, 32), both instance sets
kept, as detection's :class:`~libreyolo.data.augment.AugmentConfig` ``mixup``) and apply detection's
random affine (:func:`~libreyolo.data.augment.affine_matrix`: ``degrees``, ``translate``,
``shear``, ``perspective``; its zoom is left at 1, the random ``scale`` above already zooms):
the pixels are warped, the polygons moved as points by the same matrix and rasterised again (the
canvas clips them), so masks and boxes still come from the moved outlines. ``single_cls`` makes
every instance class 0. ``rect`` (as detection's): files sorted by aspect ratio, items on (H, W)
canvases (multiples of 32 around the image at a long side of S, or the batch's shape), masks
H / 4 x W / 4, boxes normalised by W and H, no mosaic; :func:`collate_segment` pads a batch.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import numpy as np
import torch

from .._cv import cv2
from ..errors import ConfigError, DatasetError
from .augment import mosaic_tiles, paste_resized
from .batching import RectItems
from .labels import label_path
from .seeded import MosaicSeededDataset

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


def transform_polygons(polygons: list[np.ndarray], M: np.ndarray) -> list[np.ndarray]:
    """Each polygon (ndarray[k, 2] pixel-centre x, y) through the 3 x 3 matrix ``M`` (the one
    OpenCV's ``warpAffine`` / ``warpPerspective`` apply to pixel centres), with the perspective divide.

    Example:
        >>> M = np.array([[1.0, 0, 2], [0, 1, 3], [0, 0, 1]])
        >>> transform_polygons([np.array([[0.0, 0.0], [1.0, 1.0]])], M)[0].tolist()
        [[2.0, 3.0], [3.0, 4.0]]
    """
    out = []
    for p in polygons:
        q = np.concatenate([np.asarray(p, np.float64).reshape(-1, 2), np.ones((len(p), 1))], 1) @ M.T
        out.append(q[:, :2] / np.where(np.abs(q[:, 2:]) < 1e-9, 1e-9, q[:, 2:]))
    return out


def rasterise(polygons: list[np.ndarray], size: int | tuple[int, int]) -> np.ndarray:
    """ndarray[n, H, W] uint8 (0/1) (``size`` = S for S x S, or (H, W)): each polygon
    (ndarray[k, 2] pixel x, y) filled on its own canvas (sub-pixel vertices; parts outside the
    canvas clipped).

    Example:
        >>> int(rasterise([np.array([[0.0, 0.0], [4.0, 0.0], [4.0, 4.0], [0.0, 4.0]])], 8)[0].sum())
        25
    """
    hw = (size, size) if isinstance(size, int) else tuple(size)
    out = np.zeros((len(polygons), *hw), np.uint8)
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
    """:func:`masks_and_boxes` from full-resolution rasters (ndarray[n, H, W] uint8 0/1, H and W
    multiples of 4)."""
    h4, w4 = (int(full.shape[1]) // MASK_RATIO, int(full.shape[2]) // MASK_RATIO) if full.ndim == 3 else (0, 0)
    keep = full.reshape(len(full), -1).any(1) if len(full) else np.zeros(0, bool)
    full = full[keep]
    boxes = np.zeros((len(full), 4), np.float32)
    for i, m in enumerate(full):
        ys, xs = np.nonzero(m)
        boxes[i] = (xs.min(), ys.min(), xs.max() + 1, ys.max() + 1)
    small = full.reshape(len(full), h4, MASK_RATIO, w4, MASK_RATIO).mean((2, 4)) >= 0.5
    return small.astype(np.uint8), boxes, np.asarray(cls, np.int64)[keep]


class SegmentDataset(RectItems, MosaicSeededDataset):
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
        mixup: probability that a mosaic item is blended with a second mosaic (instances of both).
        degrees, translate, shear, perspective: the random affine after placement (detection's
            meaning; all 0, the default, skips it and draws nothing).
        single_cls: every instance becomes class 0 (label ids are still checked against ``nc``).
        rect: rectangular items, as detection's ``rect``: the files sorted by aspect ratio (h / w),
            each item on an (H, W) canvas, the smallest multiple of ``stride`` holding the image
            at a long side of S (:meth:`rect_shape`), or its batch's shape after
            :meth:`set_batch_shapes`; no mosaic (nor mixup). :func:`collate_segment` pads a batch.
    """

    def __init__(self, files: list[Path], *, imgsz: int, nc: int, augment: bool = False,
                 scale: tuple[float, float] = (0.5, 1.5), fliplr: float = 0.5, flipud: float = 0.0,
                 hsv_h: float = 0.015, hsv_s: float = 0.7, hsv_v: float = 0.4, mosaic: float = 0.0,
                 mixup: float = 0.0, degrees: float = 0.0, translate: float = 0.0, shear: float = 0.0,
                 perspective: float = 0.0, single_cls: bool = False, rect: bool = False, stride: int = 32,
                 prefix: str = "") -> None:
        from .augment import AugmentConfig

        if isinstance(imgsz, bool) or not isinstance(imgsz, int) or imgsz < 8 or imgsz % MASK_RATIO:
            raise ConfigError(f"imgsz must be an int >= 8 and a multiple of {MASK_RATIO}, got {imgsz!r}")
        # the affine's ranges, checked as detection checks them; zoom 1 (``scale`` zooms at placement)
        self.hyp = AugmentConfig(mosaic=float(mosaic), mixup=float(mixup), degrees=degrees, translate=translate,
                                 scale=0.0, shear=shear, perspective=perspective)
        self.affine = bool(degrees or translate or shear or perspective)
        self.single_cls = bool(single_cls)
        self.files = [Path(f) for f in files]
        self.rect, self.stride = bool(rect), int(stride)
        if self.rect:
            self._sort_by_aspect(_image_hw, prefix)
            mosaic = 0.0
        self.imgsz, self.nc, self.augment, self.prefix = imgsz, int(nc), augment, prefix
        self.scale, self.flips, self.hsv, self.mosaic = scale, (fliplr, flipud), (hsv_h, hsv_s, hsv_v), float(mosaic)
        # epoch, seed, mosaic on (shared memory: reaches the loader's workers)
        self._init_state(int(augment and self.mosaic > 0))

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
        return img, [p * (w, h) + 0.5 for _, p in labels], [0 if self.single_cls else c for c, _ in labels]

    @staticmethod
    def _paste(canvas: np.ndarray, img: np.ndarray, polys: list[np.ndarray], r: float, ox: int,
               oy: int) -> list[np.ndarray]:
        """Resize ``img`` by ``r``, paste it with its top-left corner at (ox, oy) (clipped to the
        canvas); the polygons, moved the same way."""
        h, w = img.shape[:2]
        nh, nw = max(1, int(round(h * r))), max(1, int(round(w * r)))
        paste_resized(canvas, img, nw, nh, ox, oy)
        return [p * (nw / w, nh / h) + (ox, oy) for p in polys]

    def _mosaic(self, i: int, rng: np.random.Generator) -> tuple[np.ndarray, list[np.ndarray], list[int]]:
        s = self.imgsz
        big = np.full((2 * s, 2 * s, 3), 114, np.uint8)
        polys: list[np.ndarray] = []
        cls: list[int] = []
        for (img, p, c), nw, nh, ox, oy in mosaic_tiles(rng, size=s, first=i, count=len(self.files), scale=self.scale,
                                                         load=self._load):
            paste_resized(big, img, nw, nh, ox, oy)
            h, w = img.shape[:2]
            polys += [q * (nw / w, nh / h) + (ox, oy) for q in p]
            cls += c
        canvas = cv2.resize(big, (s, s), interpolation=cv2.INTER_AREA)
        return canvas, [p * 0.5 for p in polys], cls

    def _warp(self, canvas: np.ndarray, polys: list[np.ndarray], rng: np.random.Generator
              ) -> tuple[np.ndarray, list[np.ndarray]]:
        """Detection's random affine of the canvas, the polygons (pixel-edge coordinates) moved as
        points by the same matrix."""
        from ..ops.letterbox import PAD_VALUE
        from .augment import affine_matrix

        hw = canvas.shape[:2]
        M, _ = affine_matrix(rng, in_shape=hw, out_shape=hw, hyp=self.hyp)
        fill, dsize = (PAD_VALUE,) * 3, (hw[1], hw[0])
        if self.hyp.perspective:
            canvas = cv2.warpPerspective(canvas, M, dsize, borderValue=fill)
        else:
            canvas = cv2.warpAffine(canvas, M[:2], dsize, flags=cv2.INTER_LINEAR, borderValue=fill)
        return canvas, [p + 0.5 for p in transform_polygons([p - 0.5 for p in polys], M)]

    def __getitem__(self, i: int) -> dict[str, Any]:
        H, W = self.out_shape(i)
        img, polys, cls = self._load(i)
        h, w = img.shape[:2]
        rng = self._rng(i) if self.augment else None
        r = min(H / h, W / w) * (rng.uniform(*self.scale) if rng is not None else 1.0)
        nh, nw = max(1, int(round(h * r))), max(1, int(round(w * r)))
        if rng is None:  # letterbox: centred, grey padding
            ox, oy = (W - nw) // 2, (H - nh) // 2
        else:  # random placement on (or crop of) the H x W canvas
            ox = int(rng.integers(min(0, W - nw), max(0, W - nw) + 1))
            oy = int(rng.integers(min(0, H - nh), max(0, H - nh) + 1))
        if rng is not None and self.mosaic_enabled and rng.random() < self.mosaic:
            canvas, polys, cls = self._mosaic(i, rng)
            if self.hyp.mixup and rng.random() < self.hyp.mixup:  # a second mosaic, both instance sets
                canvas, polys, cls = mixup(canvas, polys, cls, *self._mosaic(int(rng.integers(0, len(self))), rng),
                                           rng)
        else:
            canvas = np.full((H, W, 3), 114, np.uint8)
            polys = self._paste(canvas, img, polys, r, ox, oy)
        if rng is not None and self.affine:
            canvas, polys = self._warp(canvas, polys, rng)
        full = rasterise([p - 0.5 for p in polys], canvas.shape[:2])
        if rng is not None:  # flips move the rasters with the pixels
            from .augment import hsv_jitter

            canvas = hsv_jitter(canvas, rng, h=self.hsv[0], s=self.hsv[1], v=self.hsv[2])
            if rng.random() < self.flips[0]:
                canvas, full = canvas[:, ::-1], full[:, :, ::-1]
            if rng.random() < self.flips[1]:
                canvas, full = canvas[::-1], full[:, ::-1]
        masks, boxes, classes = from_rasters(np.ascontiguousarray(full), cls)
        xywh = np.concatenate(((boxes[:, :2] + boxes[:, 2:]) / 2, boxes[:, 2:] - boxes[:, :2]), 1)
        xywh /= np.array([canvas.shape[1], canvas.shape[0]] * 2, np.float32)
        return {"img": torch.from_numpy(np.ascontiguousarray(canvas)).permute(2, 0, 1).contiguous(),
                "cls": torch.from_numpy(classes), "bboxes": torch.from_numpy(xywh.astype(np.float32)),
                "masks": torch.from_numpy(masks), "ori_shape": (h, w), "ratio_pad": ((nw / w, nh / h), (ox, oy)),
                "im_file": str(self.files[i])}


def mixup(img: np.ndarray, polys: list[np.ndarray], cls: list[int], img2: np.ndarray, polys2: list[np.ndarray],
          cls2: list[int], rng: np.random.Generator) -> tuple[np.ndarray, list[np.ndarray], list[int]]:
    """Blend two canvases of one shape (weight ``r ~ Beta(32, 32)`` on the first, as detection's
    mixup) and keep both instance sets, the first's first.

    Example:
        >>> a, b = np.zeros((4, 4, 3), np.uint8), np.full((4, 4, 3), 200, np.uint8)
        >>> sq = np.array([[0.0, 0.0], [2.0, 0.0], [2.0, 2.0]])
        >>> img, p, c = mixup(a, [sq], [1], b, [sq + 1, sq + 2], [2, 3], np.random.default_rng(0))
        >>> len(p), c, 80 < int(img[0, 0, 0]) < 120
        (3, [1, 2, 3], True)
    """
    r = rng.beta(32.0, 32.0)
    out = (img.astype(np.float32) * r + img2.astype(np.float32) * (1.0 - r)).astype(np.uint8)
    return out, [*polys, *polys2], [*cls, *cls2]


def collate_segment(items: list[dict[str, Any]]) -> dict[str, Any]:
    """Stack items: ``img`` Tensor[B, 3, H, W] uint8, ``batch_idx`` Tensor[N] (image of each
    instance, images in order), ``cls`` Tensor[N], ``bboxes`` Tensor[N, 4], ``masks``
    Tensor[N, H / 4, W / 4] uint8; ``ori_shape``, ``ratio_pad``, ``im_file`` as lists. Items of
    different sizes (``rect``) are padded at the bottom / right to the largest H and W (images
    with grey 114, masks with 0) and their boxes renormalised to it."""
    if not items:
        raise ValueError("collate_segment got an empty list of items")
    counts = torch.tensor([int(it["cls"].shape[0]) for it in items], dtype=torch.int64)
    H = max(int(it["img"].shape[1]) for it in items)
    W = max(int(it["img"].shape[2]) for it in items)
    imgs, boxes, masks = [], [], []
    for it in items:
        img, b, m = it["img"], it["bboxes"], it["masks"]
        h, w = int(img.shape[1]), int(img.shape[2])
        if (h, w) != (H, W):
            img = torch.nn.functional.pad(img, (0, W - w, 0, H - h), value=114)
            m = torch.nn.functional.pad(m, (0, (W - w) // MASK_RATIO, 0, (H - h) // MASK_RATIO), value=0)
            b = b * torch.tensor([w / W, h / H, w / W, h / H], dtype=b.dtype)
        imgs.append(img)
        boxes.append(b)
        masks.append(m)
    return {"img": torch.stack(imgs),
            "batch_idx": torch.repeat_interleave(torch.arange(len(items), dtype=torch.int64), counts),
            "cls": torch.cat([it["cls"] for it in items]), "bboxes": torch.cat(boxes),
            "masks": torch.cat(masks),
            **{k: [it[k] for it in items] for k in ("ori_shape", "ratio_pad", "im_file")}}


def _image_hw(f: Path, prefix: str) -> tuple[int, int]:
    """(h, w) of an image file from its header (PIL), decoding it only where PIL cannot."""
    try:
        from PIL import Image

        with Image.open(f) as im:
            w, h = im.size
        return int(h), int(w)
    except Exception:  # noqa: BLE001 - fall back to decoding
        img = cv2.imread(str(f), cv2.IMREAD_COLOR)
        if img is None:
            raise DatasetError(f"{prefix}image {f} could not be read (missing or not an image)") from None
        return int(img.shape[0]), int(img.shape[1])


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
