"""YOLO-format detection dataset and its collate function.

An item is a dict::

    img        Tensor[3, H, W] uint8, RGB
    cls        Tensor[n] int64
    bboxes     Tensor[n, 4] float32, cx cy w h normalised by the returned image's W and H
    im_file    str
    ori_shape  (h0, w0) of the image as read from disk
    ratio_pad  ((ratio,), (pad_w, pad_h)): x_img = x_orig * ratio + pad_w (same for y). For
               validation items (``augment=False``) this is exactly the letterbox; for training
               items it describes the resize/letterbox before the random affine, informational.

Training items (``augment=True``): a mosaic of 4 images with probability ``hyp.mosaic`` (until
:meth:`DetectionDataset.close_mosaic`), else the image letterboxed to ``imgsz``; then a random
affine into ``imgsz x imgsz``, HSV jitter and flips. Validation items: letterbox to
``imgsz x imgsz``, or with ``rect=True`` to the smallest multiple of 32 holding the image
resized to a long side of ``imgsz`` (images are then ordered by aspect ratio, so that
consecutive items have similar shapes; :func:`collate_detection` pads a batch to its largest).
Rectangular training (``rect=True, augment=True``): no mosaic; each image is letterboxed to its
batch's shape (:meth:`DetectionDataset.set_batch_shapes`, :mod:`libreyolo.data.batching`), or
its own rect shape before that is set, then the random affine into that shape, HSV and flips.

Augmentation is a pure function of ``(seed, epoch, index)``. ``epoch``, ``seed`` and the
mosaic switch live in a small shared-memory tensor, so :meth:`set_epoch` and
:meth:`close_mosaic` reach persistent DataLoader workers too; call them before iterating the
epoch they apply to.
"""

from __future__ import annotations

import logging
import math
import os
from pathlib import Path
from typing import Any

import numpy as np
import torch
from torch.utils.data import Dataset

from .._cv import cv2
from ..errors import ConfigError, DatasetError
from ..ops.letterbox import PAD_VALUE
from .augment import AugmentConfig, letterbox_image, mosaic4, photometric_and_flips, random_affine
from .labels import LabelIndex, default_cache_path, scan_labels

logger = logging.getLogger(__name__)
AUTO_CACHE_BYTES = 1 << 30  # cache="auto": the largest resized-image cache built without being asked

_EPOCH, _MOSAIC, _SEED = 0, 1, 2


class DetectionDataset(Dataset):
    """Images + YOLO labels -> training or validation items (see the module docstring).

    Args:
        img_files: image paths (e.g. ``DataConfig.train``); labels are found by
            :func:`libreyolo.data.labels.label_path`.
        imgsz: output side in pixels (a multiple of 32 is expected by the models).
        augment: training augmentation (True) or plain letterbox (False).
        hyp: augmentation settings, default :class:`AugmentConfig` (ignored when not augmenting).
        nc: number of classes; label class ids must lie in ``[0, nc)``.
        rect: images sorted by aspect ratio, rectangular letterbox (per image, or per batch after
            :meth:`set_batch_shapes`); with ``augment`` there is no mosaic.
        cache_dir: folder for the label cache; default next to the labels folder.
        single_cls: every label becomes class 0 (the cache keeps the original ids).
        prefix: prepended to log messages (e.g. ``"train: "``).
        cache: ``True`` / ``"ram"`` decodes and resizes every image once into memory
            (:meth:`cache_images`), used by the augmented (training) path; ``"auto"`` does so only
            when the resized images fit in ``AUTO_CACHE_BYTES`` (1 GiB) and a quarter of the free
            memory (a small dataset then decodes no file per mosaic), silently otherwise.
        labels: the split's label index when it does not come from ``.txt`` files (a COCO JSON
            split: :meth:`libreyolo.data.config.DataConfig.label_index`); ``img_files`` are then
            the files it indexes.

    Attributes: ``im_files`` (list[str]), ``shapes`` (ndarray[N, 2] int64, (h, w) on disk),
    ``labels`` (list of ndarray[n, 5] float32 ``cls cx cy w h`` normalised to the original).

    Example:
        >>> ds = DetectionDataset(cfg.val, imgsz=320, augment=False, nc=cfg.nc)
        >>> item = ds[0]; item["img"].shape
        torch.Size([3, 320, 320])
    """

    stride = 32

    def __init__(self, img_files: list[Path], *, imgsz: int, augment: bool,
                 hyp: AugmentConfig | None = None, nc: int, rect: bool = False,
                 cache_dir: Path | None = None, single_cls: bool = False, prefix: str = "",
                 labels: LabelIndex | None = None, cache: bool | str = False) -> None:
        if isinstance(imgsz, bool) or not isinstance(imgsz, int) or imgsz < self.stride:
            raise ConfigError(f"imgsz must be an int >= {self.stride}, got {imgsz!r}")
        if isinstance(nc, bool) or not isinstance(nc, int) or nc < 1:
            raise ConfigError(f"nc must be a positive int, got {nc!r}")
        if hyp is not None and not isinstance(hyp, AugmentConfig):
            raise ConfigError(f"hyp must be an AugmentConfig, got {type(hyp).__name__}")
        files = [Path(f) for f in img_files]
        if not files:
            raise DatasetError(f"{prefix}empty dataset: no image files given")
        self.imgsz = imgsz
        self.augment = bool(augment)
        self.hyp = hyp if hyp is not None else AugmentConfig()
        self.nc = nc
        self.rect = bool(rect)
        self.prefix = prefix
        index = labels if labels is not None else scan_labels(
            files, nc=nc, cache_path=default_cache_path(files, cache_dir=cache_dir), prefix=prefix)
        self.im_files: list[str] = index.im_files
        self.shapes: np.ndarray = index.shapes
        self.labels: list[np.ndarray] = index.labels
        if single_cls:  # every object is class 0 (ids were checked against nc above)
            self.labels = [np.concatenate([np.zeros_like(a[:, :1]), a[:, 1:]], axis=1) for a in self.labels]
        if self.rect:
            order = np.argsort(self.shapes[:, 0] / self.shapes[:, 1], kind="stable")
            self.im_files = [self.im_files[i] for i in order]
            self.shapes = self.shapes[order]
            self.labels = [self.labels[i] for i in order]
        self.batch_shapes: np.ndarray | None = None  # rect: (H, W) per item of its batch (set_batch_shapes)
        self._state = torch.zeros(3, dtype=torch.int64).share_memory_()
        self._state[_MOSAIC] = 1
        self._ram: list[tuple[np.ndarray, tuple[int, int], float]] | None = None
        if cache not in (False, True, "ram", "auto"):
            raise ConfigError(f"cache must be False, True, 'ram' or 'auto' (decoded, resized images kept in memory), "
                              f"got {cache!r}")
        if cache:
            self.cache_images(auto=cache == "auto")

    def cache_images(self, *, auto: bool = False) -> bool:
        """Decode and resize every image once into memory (``cache=True``): the augmented path then
        reads no file. Skipped, with a warning, when the images would take more than half of the
        memory available now; with ``auto`` skipped quietly unless they fit in ``AUTO_CACHE_BYTES``
        and a quarter of it. Returns whether the cache was built."""
        need = sum(int(round(h * r)) * int(round(w * r)) * 3 for h, w in self.shapes.tolist()
                   for r in [self.imgsz / max(h, w)])
        free = _available_memory()
        if auto:
            limit = AUTO_CACHE_BYTES if free is None else min(AUTO_CACHE_BYTES, free // 4)
            if need > limit:
                logger.debug("%scache='auto': the resized images need %.2f GB, more than %.2f GB; reading them "
                             "from disk", self.prefix, need / 1e9, limit / 1e9)
                return False
        elif free is not None and need > free // 2:
            logger.warning("%scache: the resized images need %.1f GB, more than half of the %.1f GB available; "
                           "reading them from disk instead", self.prefix, need / 1e9, free / 1e9)
            return False
        from concurrent.futures import ThreadPoolExecutor

        from tqdm import tqdm

        with ThreadPoolExecutor(max(1, min(8, os.cpu_count() or 1))) as pool:
            loaded = list(tqdm(pool.map(self._decode_resized, range(len(self))), total=len(self),
                               desc=f"{self.prefix}caching images", unit="img", disable=None, leave=False))
        self._ram = loaded
        logger.info("%scached %d images in memory (%.2f GB)", self.prefix, len(loaded), need / 1e9)
        return True

    def set_batch_shapes(self, batch: int) -> np.ndarray:
        """``rect``: letterbox every item to the shape of its chunk of ``batch`` consecutive items
        (:func:`~libreyolo.data.batching.rect_batch_shapes`); call before the loader's workers start."""
        from .batching import rect_batch_shapes

        if not self.rect:
            raise ConfigError("set_batch_shapes needs a rect=True dataset (images sorted by aspect ratio)")
        self.batch_shapes = rect_batch_shapes(self.shapes, imgsz=self.imgsz, batch=batch, stride=self.stride)
        return self.batch_shapes

    def out_shape(self, i: int) -> tuple[int, int]:
        """(H, W) item ``i`` is letterboxed to: its batch's shape, its own rect shape, or square."""
        if not self.rect:
            return (self.imgsz, self.imgsz)
        if self.batch_shapes is not None:
            h, w = self.batch_shapes[i]
            return (int(h), int(w))
        return self.rect_shape(i)

    # ---- shared state ------------------------------------------------------------------------
    def set_epoch(self, epoch: int) -> None:
        """Seed augmentation for ``epoch`` (also in persistent workers). Call before iterating."""
        if isinstance(epoch, bool) or not isinstance(epoch, int) or epoch < 0:
            raise ConfigError(f"epoch must be an int >= 0, got {epoch!r}")
        self._state[_EPOCH] = epoch

    def set_seed(self, seed: int) -> None:
        """Base seed of the augmentation streams (``build_dataloader`` sets it from its ``seed``)."""
        self._state[_SEED] = int(seed) & 0x7FFFFFFFFFFFFFFF

    def close_mosaic(self) -> None:
        """Turn mosaic off for the rest of training (also in persistent workers)."""
        self._state[_MOSAIC] = 0

    @property
    def epoch(self) -> int:
        return int(self._state[_EPOCH])

    @property
    def mosaic_enabled(self) -> bool:
        return bool(self._state[_MOSAIC]) and self.augment and self.hyp.mosaic > 0 and not self.rect

    def _rng(self, index: int) -> np.random.Generator:
        return np.random.default_rng([int(self._state[_SEED]), int(self._state[_EPOCH]), index])

    # ---- loading -----------------------------------------------------------------------------
    def __len__(self) -> int:
        return len(self.im_files)

    def _read(self, i: int) -> np.ndarray:
        img = cv2.imread(self.im_files[i], cv2.IMREAD_COLOR)
        if img is None:
            raise DatasetError(f"{self.prefix}image {self.im_files[i]} could not be read although it "
                               "passed the scan; was it changed or removed during training?")
        return cv2.cvtColor(img, cv2.COLOR_BGR2RGB)

    def _pixel_boxes(self, i: int, h: int, w: int) -> tuple[np.ndarray, np.ndarray]:
        lab = self.labels[i]
        cxcywh = lab[:, 1:].astype(np.float64)
        boxes = np.stack([(cxcywh[:, 0] - cxcywh[:, 2] / 2) * w, (cxcywh[:, 1] - cxcywh[:, 3] / 2) * h,
                          (cxcywh[:, 0] + cxcywh[:, 2] / 2) * w, (cxcywh[:, 1] + cxcywh[:, 3] / 2) * h], 1)
        return boxes.reshape(-1, 4), lab[:, 0].astype(np.int64)

    def _decode_resized(self, i: int) -> tuple[np.ndarray, tuple[int, int], float]:
        """Image ``i`` resized to a long side of ``imgsz``, its (h0, w0) and the ratio."""
        img = self._read(i)
        h0, w0 = img.shape[:2]
        r = self.imgsz / max(h0, w0)
        if r != 1:
            nw, nh = max(1, round(w0 * r)), max(1, round(h0 * r))
            img = cv2.resize(img, (nw, nh), interpolation=cv2.INTER_LINEAR)
        return img, (h0, w0), r

    def _load_resized(self, i: int) -> tuple[np.ndarray, np.ndarray, np.ndarray, tuple[int, int], float]:
        """Image resized to a long side of ``imgsz``, its pixel boxes and classes, (h0, w0), ratio."""
        img, ori, r = self._ram[i] if self._ram is not None else self._decode_resized(i)
        boxes, cls = self._pixel_boxes(i, *img.shape[:2])
        return img, boxes, cls, ori, r

    def rect_shape(self, i: int) -> tuple[int, int]:
        """(H, W) of item ``i`` under ``rect``: smallest multiple of 32 around the resized image."""
        h0, w0 = (int(v) for v in self.shapes[i])
        r = self.imgsz / max(h0, w0)
        return (int(math.ceil(h0 * r / self.stride) * self.stride),
                int(math.ceil(w0 * r / self.stride) * self.stride))

    def __getitem__(self, i: int) -> dict[str, Any]:
        n = len(self.im_files)
        if not -n <= i < n:
            raise IndexError(f"index {i} out of range for a dataset of {n} images")
        i = int(i) % n
        if not self.augment:
            img0 = self._read(i)
            h0, w0 = img0.shape[:2]
            boxes, cls = self._pixel_boxes(i, h0, w0)
            img, boxes, ratio, pad = letterbox_image(img0, boxes, self.out_shape(i))
        else:
            img, boxes, cls, (h0, w0), ratio, pad = self._augmented(i)
        return _item(img, boxes, cls, self.im_files[i], (h0, w0), ratio, pad)

    def _augmented(self, i: int) -> tuple[np.ndarray, np.ndarray, np.ndarray, tuple[int, int],
                                          float, tuple[float, float]]:
        rng = self._rng(i)
        s, hyp = self.imgsz, self.hyp
        if self.mosaic_enabled and rng.random() < hyp.mosaic:
            img, boxes, cls, ori, ratio = self._mosaic(i, rng)
            pad = (0.0, 0.0)
            if hyp.mixup and rng.random() < hyp.mixup:  # blend with a second mosaic, keep both box sets
                img2, boxes2, cls2, _, _ = self._mosaic(int(rng.integers(0, len(self))), rng)
                r = rng.beta(32.0, 32.0)
                img = (img.astype(np.float32) * r + img2.astype(np.float32) * (1.0 - r)).astype(np.uint8)
                boxes, cls = np.concatenate([boxes, boxes2], 0), np.concatenate([cls, cls2], 0)
        else:
            out = self.out_shape(i) if self.rect else (s, s)
            img, boxes, cls, ori, r = self._load_resized(i)
            img, boxes, r2, pad = letterbox_image(img, boxes, out)
            img, boxes, cls = random_affine(img, boxes, cls, rng, out_shape=out, hyp=hyp)
            ratio = r * r2
        img, boxes = photometric_and_flips(img, boxes, rng, hyp=hyp)
        return img, boxes, cls, ori, ratio, pad


    def _mosaic(self, i: int, rng: np.random.Generator) -> tuple[np.ndarray, np.ndarray, np.ndarray,
                                                                  tuple[int, int], float]:
        """Image ``i`` and three random others as one mosaic, then the random affine."""
        s = self.imgsz
        picks = [i] + [int(j) for j in rng.integers(0, len(self), 3)]
        parts = [self._load_resized(j) for j in picks]
        canvas, boxes, cls = mosaic4([p[0] for p in parts], [p[1] for p in parts],
                                     [p[2] for p in parts], rng, size=s)
        img, boxes, cls = random_affine(canvas, boxes, cls, rng, out_shape=(s, s), hyp=self.hyp)
        return img, boxes, cls, parts[0][3], parts[0][4]


def _available_memory() -> int | None:
    """Bytes of memory available now (Linux ``MemAvailable``), or None where unknown."""
    try:
        with open("/proc/meminfo") as f:
            for line in f:
                if line.startswith("MemAvailable:"):
                    return int(line.split()[1]) * 1024
    except (OSError, ValueError, IndexError):
        pass
    return None


def _item(img: np.ndarray, boxes: np.ndarray, cls: np.ndarray, im_file: str, ori: tuple[int, int],
          ratio: float, pad: tuple[float, float]) -> dict[str, Any]:
    h, w = img.shape[:2]
    b = boxes.reshape(-1, 4).astype(np.float64)
    cxcywh = np.stack([(b[:, 0] + b[:, 2]) / 2 / w, (b[:, 1] + b[:, 3]) / 2 / h,
                       (b[:, 2] - b[:, 0]) / w, (b[:, 3] - b[:, 1]) / h], 1)
    return {
        "img": torch.from_numpy(np.ascontiguousarray(img.transpose(2, 0, 1))),
        "cls": torch.from_numpy(cls.astype(np.int64).reshape(-1)),
        "bboxes": torch.from_numpy(cxcywh.astype(np.float32).reshape(-1, 4)),
        "im_file": im_file,
        "ori_shape": (int(ori[0]), int(ori[1])),
        "ratio_pad": ((float(ratio),), (float(pad[0]), float(pad[1]))),
    }


def collate_detection(items: list[dict[str, Any]]) -> dict[str, Any]:
    """Stack items into a batch.

    Returns img (Tensor[B, 3, H, W] uint8), batch_idx (Tensor[N] int64, image index of each box),
    cls (Tensor[N] int64), bboxes (Tensor[N, 4] float32, cx cy w h normalised to the batch image
    size), im_file (list[str]), ori_shape (list), ratio_pad (list). Images of different sizes
    (``rect``) are padded with grey at the bottom/right to the largest H and W; their boxes are
    renormalised, pixel coordinates and ``ratio_pad`` are unchanged.
    """
    if not items:
        raise ValueError("collate_detection got an empty list of items")
    H = max(int(it["img"].shape[1]) for it in items)
    W = max(int(it["img"].shape[2]) for it in items)
    imgs, boxes = [], []
    for it in items:
        img, b = it["img"], it["bboxes"]
        h, w = int(img.shape[1]), int(img.shape[2])
        if (h, w) != (H, W):
            canvas = torch.full((3, H, W), PAD_VALUE, dtype=img.dtype)
            canvas[:, :h, :w] = img
            img = canvas
            b = b * torch.tensor([w / W, h / H, w / W, h / H], dtype=b.dtype)
        imgs.append(img)
        boxes.append(b)
    counts = [int(it["cls"].shape[0]) for it in items]
    return {
        "img": torch.stack(imgs, 0),
        "batch_idx": torch.repeat_interleave(torch.arange(len(items), dtype=torch.int64),
                                             torch.tensor(counts, dtype=torch.int64)),
        "cls": torch.cat([it["cls"] for it in items], 0),
        "bboxes": torch.cat(boxes, 0).reshape(-1, 4),
        "im_file": [it["im_file"] for it in items],
        "ori_shape": [it["ori_shape"] for it in items],
        "ratio_pad": [it["ratio_pad"] for it in items],
    }
