"""Pose datasets: images with YOLO pose labels, and ``shapes-pose``.

Layout as for detection (:mod:`libreyolo.data.config`): ``images/<split>/x.jpg`` with
``labels/<split>/x.txt``. The dataset yaml adds

- ``kpt_shape: [K, D]`` (required): K keypoints per object, D = 3 (x, y, visibility) or 2 (x, y);
- ``flip_idx`` (a permutation of 0..K-1 that is its own inverse): which keypoint each one becomes
  under a horizontal flip (left and right swap). Without it horizontal flips are off;
- ``skeleton`` (optional): pairs ``[i, j]`` of keypoint indices that plots join with a line;
- ``kpt_sigmas`` (optional): K OKS sigmas for validation (default :func:`~libreyolo.ops.keypoints.metric_sigmas`).

Each non-blank label line is one object, ``cls cx cy w h x1 y1 v1 ... xK yK vK`` (Ultralytics'
pose format): an integer class id, the box centre and size, then the keypoints, all normalised by
the image width and height; ``v`` is 0 (not labelled: x, y are ignored, usually 0), 1 (labelled,
occluded) or 2 (labelled, visible). With D = 2 every keypoint counts as labelled. A line with
another number of columns than ``5 + K * D``, a non-number, a class id outside ``0..nc-1``, a box
value or a labelled keypoint outside [0, 1] or a visibility other than 0, 1, 2 raises a one-line
:class:`~libreyolo.errors.DatasetError` naming the file and line. A missing label file is an image
without objects.

COCO person-keypoints JSON instead of label files: the yaml's ``<split>_json`` keys
(:mod:`libreyolo.data.coco`) next to ``kpt_shape: [K, 3]``; each annotation's
``keypoints`` (K pixel triples x, y, v) are read with its box, normalised the same way (a labelled
keypoint outside its image becomes v = 0). A category's ``keypoints`` name list must have K names.

An item: ``img`` Tensor[3, S, S] (``rect``: [3, H, W]) uint8 RGB (letterboxed; training: randomly
scaled and placed, optionally mixed up and affine-warped, colour-jittered, flipped), ``cls`` Tensor[n]
int64, ``bboxes`` Tensor[n, 4] float32 (cx, cy, w, h normalised to the item's W and H),
``keypoints`` Tensor[n, K, 3] float32 (x, y normalised likewise, v), plus ``ori_shape``,
``ratio_pad``, ``im_file`` and ``kpt_sigmas`` (the yaml's, or ``None``). A horizontal flip mirrors x
and permutes the keypoints by ``flip_idx``; a vertical flip mirrors y only. Boxes are clipped to the
canvas (an object whose box is cut to under 2 pixels is dropped) and keypoints that leave it become
v = 0 with x = y = 0 (the label convention of an unlabelled keypoint).

Training may build a 2 x 2 mosaic instead (``mosaic``: this image and three random others, each
scaled to a long side of S times the random ``scale`` and placed in its quadrant around a random
centre of a 2S canvas, which is then halved to S; keypoints and boxes move with their image, a
keypoint cut off by the canvas edge becomes unlabelled; switched off by the trainer for the last
``close_mosaic`` epochs), blend the item with a second one built the same way (``mixup``: pixels
weighted ~ Beta(32, 32), both object sets kept, the first's first: a second mosaic for a mosaic
item, a second placed image otherwise) and apply detection's random affine
(:func:`~libreyolo.data.augment.affine_matrix`: ``degrees``, ``translate``, ``shear``,
``perspective``; its zoom is left at 1, the random ``scale`` already zooms): the pixels are warped,
the keypoints moved as points by the same matrix with the perspective divide
(:func:`transform_keypoints`), the boxes as detection moves them (hull of the moved corners, clipped,
filtered by :func:`~libreyolo.data.augment.filter_boxes`). ``single_cls`` makes every object class
0. ``rect`` (as detection's): files sorted by aspect ratio, items on (H, W) canvases (multiples of
``stride`` around the image at a long side of S, or the batch's shape), no mosaic or mixup;
:func:`collate_pose` pads a batch.
"""

from __future__ import annotations

import logging
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np
import torch

from .._cv import cv2
from ..errors import ConfigError, DatasetError
from .augment import mosaic_tiles, paste_resized
from .batching import RectItems
from .config import DataConfig
from .labels import label_path
from .seeded import MosaicSeededDataset

logger = logging.getLogger(__name__)

BUILTIN_POSE = ("shapes-pose",)


@dataclass(frozen=True, kw_only=True)
class PoseDataConfig(DataConfig):
    """A :class:`~libreyolo.data.config.DataConfig` with the keypoint keys of the yaml."""

    kpt_shape: tuple[int, int] = (17, 3)
    flip_idx: list[int] | None = None
    skeleton: list[list[int]] | None = None
    kpt_sigmas: list[float] | None = None
    extra: dict[str, Any] = field(default_factory=dict)

    def pose_labels(self, split: str, files: list[Path], *,
                    prefix: str = "") -> dict[Path, tuple[np.ndarray, np.ndarray, np.ndarray]] | None:
        """The keypoint labels of ``files`` of ``split`` when that split is COCO JSON, else None
        (labels are ``.txt`` files next to the images)."""
        coco = self.coco.get(split)
        return coco.pose_labels(files, nc=self.nc, prefix=prefix) if coco is not None else None


def parse_pose_file(path: Path, *, nc: int, kpt_shape: tuple[int, int]) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """(classes ndarray[n] int64, boxes ndarray[n, 4] float32 cx cy w h, keypoints ndarray[n, K, 3]
    float32 x y v, all normalised) of a pose label file; D = 2 labels get v = 2.

    Example:
        >>> import tempfile; f = Path(tempfile.mkdtemp()) / "a.txt"
        >>> _ = f.write_text("1 0.5 0.5 0.2 0.2 0.45 0.45 2 0 0 0\\n")
        >>> c, b, k = parse_pose_file(f, nc=2, kpt_shape=(2, 3))
        >>> c.tolist(), k.shape, k[0, 1].tolist()
        ([1], (1, 2, 3), [0.0, 0.0, 0.0])
        >>> _ = f.write_text("1 0.5 0.5 0.2 0.2 0.45 0.45 2\\n")
        >>> parse_pose_file(f, nc=2, kpt_shape=(2, 3))
        Traceback (most recent call last):
        ...
        libreyolo.errors.DatasetError: ...a.txt line 1: 8 columns, a pose line with kpt_shape [2, 3] has 11 (cls cx cy w h, then x y v per keypoint)
    """
    k, d = kpt_shape
    empty = (np.zeros(0, np.int64), np.zeros((0, 4), np.float32), np.zeros((0, k, 3), np.float32))
    try:
        text = Path(path).read_text(encoding="utf-8")
    except FileNotFoundError:
        return empty
    except (OSError, UnicodeDecodeError) as e:
        raise DatasetError(f"label file {path} cannot be read: {e}") from e
    want = 5 + k * d
    cls, boxes, kpts = [], [], []
    for n, line in enumerate(text.splitlines(), start=1):
        fields = line.split()
        if not fields:
            continue
        where = f"{path} line {n}"
        layout = "x y v" if d == 3 else "x y"
        if len(fields) != want:
            raise DatasetError(f"{where}: {len(fields)} columns, a pose line with kpt_shape [{k}, {d}] has {want} "
                               f"(cls cx cy w h, then {layout} per keypoint)")
        try:
            values = np.array([float(v) for v in fields], np.float64)
        except ValueError:
            raise DatasetError(f"{where}: {line.strip()!r} holds a non-number; write 'cls cx cy w h' then "
                               f"{layout} per keypoint") from None
        c = values[0]
        if c != int(c) or not 0 <= c < nc:
            raise DatasetError(f"{where}: class id {fields[0]} is not an integer in [0, {nc}) (the dataset has {nc} "
                               "classes)")
        box = values[1:5]
        if not ((box >= 0) & (box <= 1)).all() or (box[2:] <= 0).any():
            raise DatasetError(f"{where}: box {box.tolist()} is not a normalised cx cy w h in [0, 1] with w, h > 0")
        kp = values[5:].reshape(k, d)
        if d == 2:
            kp = np.concatenate([kp, np.full((k, 1), 2.0)], 1)
        bad_v = [v for v in kp[:, 2] if v not in (0.0, 1.0, 2.0)]
        if bad_v:
            raise DatasetError(f"{where}: keypoint visibility {bad_v[0]:g} is none of 0 (not labelled), 1 (occluded), "
                               "2 (visible)")
        lab = kp[:, 2] > 0
        out = kp[lab, :2]
        if ((out < 0) | (out > 1)).any():
            bad = out[(out < 0) | (out > 1)][0]
            raise DatasetError(f"{where}: keypoint coordinate {bad:g} is outside [0, 1]; coordinates are normalised "
                               "by the image width and height (mark a keypoint outside the image v = 0)")
        kp[~lab, :2] = 0.0
        cls.append(int(c))
        boxes.append(box)
        kpts.append(kp)
    if not cls:
        return empty
    return (np.asarray(cls, np.int64), np.asarray(boxes, np.float32), np.asarray(kpts, np.float32))


def flip_keypoints_lr(kpts: np.ndarray, flip_idx: list[int], width: float = 1.0) -> np.ndarray:
    """Keypoints (ndarray[n, K, 3] x, y, v) of the horizontally mirrored image: ``x -> width - x``
    for labelled keypoints, then reordered by ``flip_idx`` (the left keypoint becomes the right one).

    Example:
        >>> k = np.array([[[0.2, 0.5, 2.0], [0.7, 0.5, 1.0], [0.0, 0.0, 0.0]]])
        >>> flip_keypoints_lr(k, [1, 0, 2]).tolist()
        [[[0.30000000000000004, 0.5, 1.0], [0.8, 0.5, 2.0], [0.0, 0.0, 0.0]]]
    """
    out = kpts.copy()
    lab = out[..., 2] > 0
    out[..., 0] = np.where(lab, width - out[..., 0], 0.0)
    return out[:, flip_idx]


def transform_keypoints(kpts: np.ndarray, M: np.ndarray, hw: tuple[int, int], *, offset: float = 0.0) -> np.ndarray:
    """Keypoints (ndarray[n, K, 3] pixel x, y, v) through the 3 x 3 matrix ``M`` with the
    perspective divide (``offset`` 0.5: the coordinates are pixel-edge ones and ``M`` acts on pixel
    centres, as OpenCV's warps do); labelled keypoints that land outside the (h, w) canvas, and
    unlabelled ones, become (0, 0, 0). A new array.

    Example:
        >>> k = np.array([[[1.0, 2.0, 2.0], [7.0, 1.0, 1.0]]])
        >>> M = np.array([[1.0, 0, 2], [0, 1, 3], [0, 0, 1]])
        >>> transform_keypoints(k, M, (8, 8)).tolist()
        [[[3.0, 5.0, 2.0], [0.0, 0.0, 0.0]]]
    """
    out = np.asarray(kpts, np.float64).copy()
    if out.size == 0:
        return out
    pts = np.concatenate([out[..., :2].reshape(-1, 2) - offset, np.ones((out.shape[0] * out.shape[1], 1))], 1) @ M.T
    xy = pts[:, :2] / np.where(np.abs(pts[:, 2:]) < 1e-9, 1e-9, pts[:, 2:]) + offset
    out[..., :2] = xy.reshape(out.shape[0], out.shape[1], 2)
    h, w = hw
    inside = (out[..., 0] >= 0) & (out[..., 0] <= w) & (out[..., 1] >= 0) & (out[..., 1] <= h) & (out[..., 2] > 0)
    out[~inside] = 0.0
    return out


def mixup_objects(img: np.ndarray, objs: tuple[np.ndarray, np.ndarray, np.ndarray], img2: np.ndarray,
                  objs2: tuple[np.ndarray, np.ndarray, np.ndarray], rng: np.random.Generator
                  ) -> tuple[np.ndarray, tuple[np.ndarray, np.ndarray, np.ndarray]]:
    """Blend two canvases of one shape (weight ``r ~ Beta(32, 32)`` on the first, as detection's
    mixup) and keep both object sets (classes, xyxy boxes, keypoints), the first's first.

    Example:
        >>> a, b = np.zeros((4, 4, 3), np.uint8), np.full((4, 4, 3), 200, np.uint8)
        >>> o1 = (np.array([1]), np.zeros((1, 4)), np.zeros((1, 2, 3)))
        >>> o2 = (np.array([0, 1]), np.ones((2, 4)), np.ones((2, 2, 3)))
        >>> img, (c, b, k) = mixup_objects(a, o1, b, o2, np.random.default_rng(0))
        >>> c.tolist(), k.shape, 80 < int(img[0, 0, 0]) < 120
        ([1, 0, 1], (3, 2, 3), True)
    """
    r = rng.beta(32.0, 32.0)
    out = (img.astype(np.float32) * r + img2.astype(np.float32) * (1.0 - r)).astype(np.uint8)
    return out, tuple(np.concatenate([a, b], 0) for a, b in zip(objs, objs2, strict=True))


def _paste(canvas: np.ndarray, img: np.ndarray, labels: tuple[np.ndarray, np.ndarray, np.ndarray], nw: int,
           nh: int, ox: int, oy: int) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Resize ``img`` to (nw, nh), paste it with its top-left corner at (ox, oy) (clipped to the
    canvas); its (classes, xyxy boxes, keypoints) moved to canvas pixels (unlabelled keypoints
    stay 0, 0, 0)."""
    cls, boxes, kpts = labels
    paste_resized(canvas, img, nw, nh, ox, oy)
    xyxy = np.concatenate([boxes[:, :2] - boxes[:, 2:] / 2, boxes[:, :2] + boxes[:, 2:] / 2], 1) * (nw, nh, nw, nh)
    xyxy = xyxy + (ox, oy, ox, oy)
    kp = kpts.copy()
    lab = kp[..., 2] > 0
    kp[..., :2] = np.where(lab[..., None], kp[..., :2] * (nw, nh) + (ox, oy), 0.0)
    return cls, xyxy, kp


class PoseDataset(RectItems, MosaicSeededDataset):
    """Image files with pose labels -> items (module docstring).

    Args:
        files: image paths (a :class:`PoseDataConfig` split).
        imgsz: side ``S`` of the square items.
        nc: number of classes; kpt_shape: (K, D) of the labels; flip_idx: the left/right
            permutation (``None``: no horizontal flips).
        augment: the training transform (True) or the letterbox (False).
        scale: range of the random scale factor; fliplr, flipud: flip probabilities; hsv_h, hsv_s,
            hsv_v: colour jitter gains (training).
        mosaic: probability that a training item is a 2 x 2 mosaic (module docstring), until
            :meth:`close_mosaic`.
        mixup: probability that a training item is blended with a second one built the same way
            (objects of both).
        degrees, translate, shear, perspective: the random affine after placement (detection's
            meaning; all 0, the default, skips it and draws nothing).
        single_cls: every object becomes class 0 (label ids are still checked against ``nc``).
        rect: rectangular items, as detection's ``rect``: the files sorted by aspect ratio (h / w),
            each item on an (H, W) canvas, the smallest multiple of ``stride`` holding the image at a
            long side of S (:meth:`rect_shape`), or its batch's shape after :meth:`set_batch_shapes`;
            no mosaic or mixup. :func:`collate_pose` pads a batch.
    """

    def __init__(self, files: list[Path], *, imgsz: int, nc: int, kpt_shape: tuple[int, int],
                 flip_idx: list[int] | None = None, augment: bool = False, scale: tuple[float, float] = (0.5, 1.5),
                 fliplr: float = 0.5, flipud: float = 0.0, hsv_h: float = 0.015, hsv_s: float = 0.7,
                 hsv_v: float = 0.4, mosaic: float = 0.0, mixup: float = 0.0, degrees: float = 0.0,
                 translate: float = 0.0,
                 shear: float = 0.0, perspective: float = 0.0, single_cls: bool = False, rect: bool = False,
                 stride: int = 32, kpt_sigmas: list[float] | None = None, prefix: str = "",
                 labels: dict[Path, tuple[np.ndarray, np.ndarray, np.ndarray]] | None = None) -> None:
        from .augment import AugmentConfig

        if isinstance(imgsz, bool) or not isinstance(imgsz, int) or imgsz < 8:
            raise ConfigError(f"imgsz must be an int >= 8, got {imgsz!r}")
        # the affine's ranges, checked as detection checks them; zoom 1 (``scale`` zooms at placement)
        self.hyp = AugmentConfig(mosaic=float(mosaic), mixup=float(mixup), degrees=degrees, translate=translate,
                                 scale=0.0, shear=shear, perspective=perspective)
        self.affine = bool(degrees or translate or shear or perspective)
        self.single_cls = bool(single_cls)
        self.files = [Path(f) for f in files]
        self.rect, self.stride = bool(rect), int(stride)
        if self.rect:
            from .segment import _image_hw

            self._sort_by_aspect(_image_hw, prefix)
            mosaic = 0.0
        self.imgsz, self.nc, self.augment, self.prefix = imgsz, int(nc), augment, prefix
        self.mosaic = float(mosaic)
        self.kpt_shape = (int(kpt_shape[0]), int(kpt_shape[1]))
        self.flip_idx = list(flip_idx) if flip_idx is not None else None
        self.kpt_sigmas = list(kpt_sigmas) if kpt_sigmas is not None else None
        self.labels = labels
        if labels is not None and (k := next(iter(labels.values()), None)) is not None and k[2].shape[1:] != (
                self.kpt_shape[0], 3):
            raise DatasetError(f"{prefix}keypoint labels of shape {k[2].shape[1:]} for kpt_shape {list(self.kpt_shape)}")
        if augment and fliplr > 0 and self.flip_idx is None:
            logger.warning("%sthe dataset yaml has no flip_idx: horizontal flips are off (a flip must swap left "
                           "and right keypoints)", prefix)
            fliplr = 0.0
        self.scale, self.flips, self.hsv = scale, (fliplr, flipud), (hsv_h, hsv_s, hsv_v)
        # the trainer's dataset interface (SeededDataset): epoch, seed, mosaic on (shared memory)
        self._init_state(int(augment and self.mosaic > 0))

    def __len__(self) -> int:
        return len(self.files)

    def _read(self, i: int) -> tuple[np.ndarray, tuple[np.ndarray, np.ndarray, np.ndarray]]:
        """Image ``i`` (RGB) and its labels (classes, normalised cx cy w h boxes, keypoints)."""
        f = self.files[i]
        bgr = cv2.imread(str(f), cv2.IMREAD_COLOR)
        if bgr is None:
            raise DatasetError(f"{self.prefix}image {f} could not be read (missing or not an image)")
        if self.labels is not None:  # COCO JSON keypoints, read once (data.coco.CocoSplit.pose_labels)
            cls, boxes, kpts = (v.copy() for v in self.labels[f])
        else:
            cls, boxes, kpts = parse_pose_file(label_path(f), nc=self.nc, kpt_shape=self.kpt_shape)
        if self.single_cls:
            cls = np.zeros_like(cls)
        return cv2.cvtColor(bgr, cv2.COLOR_BGR2RGB), (cls, boxes, kpts)

    def _place(self, i: int, canvas: np.ndarray, rng: np.random.Generator | None
               ) -> tuple[tuple[np.ndarray, np.ndarray, np.ndarray], tuple[int, int], tuple[int, int, int, int]]:
        """Read image ``i``, scale and paste it on ``canvas`` (letterbox, or random scale and
        place); its (classes, xyxy boxes, keypoints) in canvas pixels, (h, w), (nw, nh, ox, oy)."""
        H, W = canvas.shape[:2]
        img, labels = self._read(i)
        h, w = img.shape[:2]
        r = min(H / h, W / w) * (rng.uniform(*self.scale) if rng is not None else 1.0)
        nh, nw = max(1, int(round(h * r))), max(1, int(round(w * r)))
        if rng is None:  # letterbox: centred, grey padding
            ox, oy = (W - nw) // 2, (H - nh) // 2
        else:  # random placement on (or crop of) the H x W canvas
            ox = int(rng.integers(min(0, W - nw), max(0, W - nw) + 1))
            oy = int(rng.integers(min(0, H - nh), max(0, H - nh) + 1))
        return _paste(canvas, img, labels, nw, nh, ox, oy), (h, w), (nw, nh, ox, oy)

    def _mosaic(self, i: int, rng: np.random.Generator
                ) -> tuple[np.ndarray, tuple[np.ndarray, np.ndarray, np.ndarray], tuple[int, int]]:
        """Image ``i`` and three random others as a 2 x 2 mosaic on a 2S canvas, halved to S x S;
        the objects of all four in its pixels (keypoints left beyond the canvas are dropped later)
        and image ``i``'s (h, w)."""
        s = self.imgsz
        big = np.full((2 * s, 2 * s, 3), 114, np.uint8)
        tiles = mosaic_tiles(rng, size=s, first=i, count=len(self.files), scale=self.scale, load=self._read)
        parts = [_paste(big, img, labels, nw, nh, ox, oy) for (img, labels), nw, nh, ox, oy in tiles]
        hw0 = tuple(tiles[0][0][0].shape[:2])
        canvas = cv2.resize(big, (s, s), interpolation=cv2.INTER_AREA)
        cls, xyxy, kp = (np.concatenate(v, 0) for v in zip(*parts, strict=True))
        xyxy = xyxy.clip(0, 2 * s) * 0.5  # a box cut by the canvas edge keeps its visible part
        kp = kp.copy()
        kp[..., :2] *= 0.5
        return canvas, (cls, xyxy, kp), hw0

    def _warp(self, canvas: np.ndarray, objs: tuple[np.ndarray, np.ndarray, np.ndarray], rng: np.random.Generator
              ) -> tuple[np.ndarray, tuple[np.ndarray, np.ndarray, np.ndarray]]:
        """Detection's random affine of the canvas; keypoints moved as points by the same matrix,
        boxes as detection moves and filters them."""
        from ..ops.letterbox import PAD_VALUE
        from .augment import affine_matrix, filter_boxes, transform_boxes

        cls, xyxy, kp = objs
        hw = canvas.shape[:2]
        M, gain = affine_matrix(rng, in_shape=hw, out_shape=hw, hyp=self.hyp)
        fill, dsize = (PAD_VALUE,) * 3, (hw[1], hw[0])
        if self.hyp.perspective:
            canvas = cv2.warpPerspective(canvas, M, dsize, borderValue=fill)
        else:
            canvas = cv2.warpAffine(canvas, M[:2], dsize, flags=cv2.INTER_LINEAR, borderValue=fill)
        before = np.stack([xyxy[:, 0].clip(0, hw[1]), xyxy[:, 1].clip(0, hw[0]), xyxy[:, 2].clip(0, hw[1]),
                           xyxy[:, 3].clip(0, hw[0])], 1) if len(xyxy) else xyxy.reshape(0, 4)
        after = transform_boxes(before - 0.5, M, hw) + 0.5  # pixel-edge boxes, M on pixel centres
        after[:, [0, 2]] = after[:, [0, 2]].clip(0, hw[1])
        after[:, [1, 3]] = after[:, [1, 3]].clip(0, hw[0])
        keep = filter_boxes(before, after, gain=gain, min_px=self.hyp.min_box_px,
                            min_area_ratio=self.hyp.min_area_ratio)
        kp = transform_keypoints(kp, M, hw, offset=0.5)
        return canvas, (cls[keep], after[keep], kp[keep])

    def __getitem__(self, i: int) -> dict[str, Any]:
        H, W = self.out_shape(i)
        rng = self._rng(i) if self.augment else None
        canvas = np.full((H, W, 3), 114, np.uint8)
        if rng is not None and self.mosaic_enabled and rng.random() < self.mosaic:
            canvas, objs, (h, w) = self._mosaic(i, rng)
            nw, nh, ox, oy = W, H, 0, 0  # ratio_pad of a mosaic item: the canvas itself
            if self.hyp.mixup and rng.random() < self.hyp.mixup:  # a second mosaic, both object sets
                other, objs2, _ = self._mosaic(int(rng.integers(0, len(self))), rng)
                canvas, objs = mixup_objects(canvas, objs, other, objs2, rng)
        else:
            objs, (h, w), (nw, nh, ox, oy) = self._place(i, canvas, rng)
            if rng is not None and self.hyp.mixup and not self.rect and rng.random() < self.hyp.mixup:
                other = np.full_like(canvas, 114)  # a second image placed the same way, both object sets
                objs2, _, _ = self._place(int(rng.integers(0, len(self))), other, rng)
                canvas, objs = mixup_objects(canvas, objs, other, objs2, rng)
        if rng is not None and self.affine:
            canvas, objs = self._warp(canvas, objs, rng)
        cls, xyxy, kp = objs
        if rng is not None:
            from .augment import hsv_jitter

            canvas = hsv_jitter(canvas, rng, h=self.hsv[0], s=self.hsv[1], v=self.hsv[2])
            if rng.random() < self.flips[0]:
                canvas = canvas[:, ::-1]
                xyxy = np.stack([W - xyxy[:, 2], xyxy[:, 1], W - xyxy[:, 0], xyxy[:, 3]], 1)
                kp = flip_keypoints_lr(kp, self.flip_idx or list(range(self.kpt_shape[0])), float(W))
            if rng.random() < self.flips[1]:
                canvas = canvas[::-1]
                xyxy = np.stack([xyxy[:, 0], H - xyxy[:, 3], xyxy[:, 2], H - xyxy[:, 1]], 1)
                lab = kp[..., 2] > 0
                kp[..., 1] = np.where(lab, H - kp[..., 1], 0.0)
        xyxy = np.stack([xyxy[:, 0].clip(0, W), xyxy[:, 1].clip(0, H), xyxy[:, 2].clip(0, W),
                         xyxy[:, 3].clip(0, H)], 1) if len(xyxy) else np.zeros((0, 4))
        keep = ((xyxy[:, 2] - xyxy[:, 0]) >= 2) & ((xyxy[:, 3] - xyxy[:, 1]) >= 2)
        xyxy, kp, cls = xyxy[keep], kp[keep].astype(np.float64), cls[keep]
        inside = (kp[..., 0] >= 0) & (kp[..., 0] <= W) & (kp[..., 1] >= 0) & (kp[..., 1] <= H) & (kp[..., 2] > 0)
        kp[~inside] = 0.0
        kp[..., :2] /= (W, H)
        xywh = np.concatenate(((xyxy[:, :2] + xyxy[:, 2:]) / 2, xyxy[:, 2:] - xyxy[:, :2]), 1) / (W, H, W, H)
        return {"img": torch.from_numpy(np.ascontiguousarray(canvas)).permute(2, 0, 1).contiguous(),
                "cls": torch.from_numpy(np.asarray(cls, np.int64)), "bboxes": torch.from_numpy(xywh.astype(np.float32)),
                "keypoints": torch.from_numpy(kp.astype(np.float32)), "ori_shape": (h, w),
                "ratio_pad": ((nw / w, nh / h), (ox, oy)), "im_file": str(self.files[i]), "kpt_sigmas": self.kpt_sigmas}


def collate_pose(items: list[dict[str, Any]]) -> dict[str, Any]:
    """Stack items: ``img`` Tensor[B, 3, H, W] uint8, ``batch_idx`` Tensor[N] (image of each
    object, images in order), ``cls`` Tensor[N], ``bboxes`` Tensor[N, 4], ``keypoints``
    Tensor[N, K, 3]; ``ori_shape``, ``ratio_pad``, ``im_file`` as lists; ``kpt_sigmas`` (the
    dataset's OKS sigmas, or ``None``) once. Items of different sizes (``rect``) are padded at the
    bottom / right to the largest H and W (grey 114) and their boxes and keypoints renormalised to it."""
    if not items:
        raise ValueError("collate_pose got an empty list of items")
    counts = torch.tensor([int(it["cls"].shape[0]) for it in items], dtype=torch.int64)
    H = max(int(it["img"].shape[1]) for it in items)
    W = max(int(it["img"].shape[2]) for it in items)
    imgs, boxes, kpts = [], [], []
    for it in items:
        img, b, k = it["img"], it["bboxes"], it["keypoints"]
        h, w = int(img.shape[1]), int(img.shape[2])
        if (h, w) != (H, W):
            img = torch.nn.functional.pad(img, (0, W - w, 0, H - h), value=114)
            b = b * torch.tensor([w / W, h / H, w / W, h / H], dtype=b.dtype)
            k = k * torch.tensor([w / W, h / H, 1.0], dtype=k.dtype)
        imgs.append(img)
        boxes.append(b)
        kpts.append(k)
    return {"img": torch.stack(imgs),
            "batch_idx": torch.repeat_interleave(torch.arange(len(items), dtype=torch.int64), counts),
            "cls": torch.cat([it["cls"] for it in items]), "bboxes": torch.cat(boxes),
            "keypoints": torch.cat(kpts),
            **{k: [it[k] for it in items] for k in ("ori_shape", "ratio_pad", "im_file")},
            "kpt_sigmas": items[0].get("kpt_sigmas")}


def _pose_keys(doc: dict[str, Any], yaml_path: Path) -> dict[str, Any]:
    """The checked keypoint keys of a pose dataset yaml."""
    from ..ops.keypoints import check_flip_idx

    ks = doc.get("kpt_shape")
    if ks is None:
        raise DatasetError(f"{yaml_path} has no 'kpt_shape'; a pose dataset yaml needs kpt_shape: [K, 3] (K keypoints "
                           "of x, y, visibility) and flip_idx")
    if (not isinstance(ks, (list, tuple)) or len(ks) != 2 or not all(isinstance(v, int) and not isinstance(v, bool)
                                                                      for v in ks) or ks[0] < 1 or ks[1] not in (2, 3)):
        raise DatasetError(f"{yaml_path}: kpt_shape {ks!r} must be [K, 3] or [K, 2] with K >= 1")
    k = int(ks[0])
    out: dict[str, Any] = {"kpt_shape": (k, int(ks[1]))}
    if doc.get("flip_idx") is not None:
        try:
            out["flip_idx"] = check_flip_idx(doc["flip_idx"], k)
        except (TypeError, ValueError) as e:
            raise DatasetError(f"{yaml_path}: {e}") from None
    sk = doc.get("skeleton")
    if sk is not None:
        if not isinstance(sk, (list, tuple)) or not all(
                isinstance(p, (list, tuple)) and len(p) == 2 and all(isinstance(v, int) and 0 <= v < k for v in p)
                for p in sk):
            raise DatasetError(f"{yaml_path}: skeleton must be a list of [i, j] keypoint index pairs in 0..{k - 1}")
        out["skeleton"] = [[int(a), int(b)] for a, b in sk]
    sg = doc.get("kpt_sigmas")
    if sg is not None:
        if not isinstance(sg, (list, tuple)) or len(sg) != k or not all(
                isinstance(v, (int, float)) and v > 0 for v in sg):
            raise DatasetError(f"{yaml_path}: kpt_sigmas must be {k} positive numbers (one OKS sigma per keypoint)")
        out["kpt_sigmas"] = [float(v) for v in sg]
    return out


def load_pose_data(data: str | Path) -> PoseDataConfig:
    """The dataset description of a pose dataset yaml, or of ``"shapes-pose"`` (generated on first use).

    Example:
        >>> import tempfile; from libreyolo.data.shapes_pose import ensure_shapes_pose_dataset
        >>> cfg = load_pose_data(ensure_shapes_pose_dataset(Path(tempfile.mkdtemp()), n_train=2, n_val=1, imgsz=64))
        >>> cfg.nc, cfg.kpt_shape, cfg.flip_idx
        (2, (5, 3), [1, 0, 3, 2, 4])
    """
    import dataclasses

    import yaml

    from .config import load_data_config

    if isinstance(data, str) and data in BUILTIN_POSE:
        from .shapes_pose import ensure_shapes_pose_dataset

        data = str(ensure_shapes_pose_dataset())
    base = load_data_config(data)
    doc = yaml.safe_load(Path(base.yaml_path).read_text()) if Path(base.yaml_path).is_file() else {}
    keys = _pose_keys(doc if isinstance(doc, dict) else {}, Path(base.yaml_path))
    fields = {f.name: getattr(base, f.name) for f in dataclasses.fields(DataConfig)}
    if base.coco:  # person-keypoints JSON: read again with the keypoints of kpt_shape
        fields["coco"] = {split: c.with_keypoints(keys["kpt_shape"]) for split, c in base.coco.items()}
    return PoseDataConfig(**fields, **keys)
