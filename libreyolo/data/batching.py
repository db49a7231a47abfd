"""Rectangular training batches (``rect=True``): images grouped by aspect ratio.

A ``rect`` dataset keeps its images sorted by aspect ratio (h / w), so consecutive indices have
similar shapes. :func:`rect_batch_shapes` cuts that order into chunks of ``batch`` images and
gives every chunk one (H, W): the smallest multiple of ``stride`` holding each of its images
resized to a long side of ``imgsz`` (the largest of their :meth:`rect shapes
<libreyolo.data.dataset.DetectionDataset.rect_shape>`); every image of a chunk is letterboxed to
it. :class:`RectBatchSampler` yields those chunks whole, in an order shuffled by
``(seed, epoch)`` only (the images inside a chunk never change), so a batch is never padded to a
foreign aspect ratio.

Under DDP each process takes every ``world_size``-th chunk of the shuffled order, starting at its
rank; when the chunk count is not a multiple of ``world_size`` the first chunks are repeated so
that every process runs the same number of steps (as :class:`~torch.utils.data.DistributedSampler`
pads its indices). On one process every image appears exactly once per epoch.
"""

from __future__ import annotations

import math
from collections.abc import Iterator

import numpy as np
import torch
from torch.utils.data import Sampler

from ..errors import ConfigError


def rect_batch_shapes(shapes: np.ndarray, *, imgsz: int, batch: int, stride: int = 32) -> np.ndarray:
    """(H, W) per image (ndarray[N, 2] int64) of its chunk of ``batch`` consecutive images.

    ``shapes`` is ndarray[N, 2] of (h, w) on disk, in dataset order (sorted by aspect ratio).
    """
    if batch < 1:
        raise ConfigError(f"batch must be >= 1, got {batch}")
    hw = np.asarray(shapes, dtype=np.float64).reshape(-1, 2)
    r = imgsz / hw.max(axis=1)
    own = np.stack([np.ceil(hw[:, 0] * r / stride), np.ceil(hw[:, 1] * r / stride)], 1).astype(np.int64) * stride
    out = np.empty_like(own)
    for start in range(0, len(own), batch):
        chunk = own[start:start + batch]
        out[start:start + batch] = chunk.max(axis=0)
    return out


class RectBatchSampler(Sampler[list[int]]):
    """Chunks of ``batch`` consecutive indices of an aspect-sorted dataset, shuffled as wholes.

    ``shuffle`` permutes the chunk order with a generator seeded by ``(seed, epoch)`` (never the
    global RNG); call :meth:`set_epoch` before each epoch. ``rank`` / ``world_size`` split the
    chunks over DDP processes (see the module docstring).

    Example:
        >>> s = RectBatchSampler(10, batch=4, shuffle=False, seed=0)
        >>> list(s)
        [[0, 1, 2, 3], [4, 5, 6, 7], [8, 9]]
    """

    def __init__(self, n: int, *, batch: int, shuffle: bool, seed: int, rank: int = 0, world_size: int = 1) -> None:
        if n < 1 or batch < 1 or world_size < 1 or not 0 <= rank < world_size:
            raise ConfigError(f"RectBatchSampler needs n, batch, world_size >= 1 and 0 <= rank < world_size, got "
                              f"n={n}, batch={batch}, rank={rank}, world_size={world_size}")
        self.n, self.batch, self.shuffle, self.seed = int(n), int(batch), bool(shuffle), int(seed)
        self.rank, self.world_size = int(rank), int(world_size)
        self.epoch = 0
        self.chunks = [list(range(s, min(s + self.batch, self.n))) for s in range(0, self.n, self.batch)]

    def set_epoch(self, epoch: int) -> None:
        self.epoch = int(epoch)

    def __len__(self) -> int:
        return math.ceil(len(self.chunks) / self.world_size)

    def order(self) -> list[int]:
        """Chunk numbers of this epoch for every process (padded to a multiple of ``world_size``)."""
        k = len(self.chunks)
        if self.shuffle:
            g = torch.Generator().manual_seed((self.seed * 1_000_003 + self.epoch) & 0x7FFFFFFFFFFFFFFF)
            order = torch.randperm(k, generator=g).tolist()
        else:
            order = list(range(k))
        total = len(self) * self.world_size
        while len(order) < total:
            order += order[:total - len(order)]
        return order

    def __iter__(self) -> Iterator[list[int]]:
        mine = self.order()[self.rank::self.world_size]
        return iter([list(self.chunks[c]) for c in mine])


class RectItems:
    """``rect`` for a dataset that builds its items on (H, W) canvases (segment, pose): the files
    sorted by aspect ratio (:meth:`_sort_by_aspect`), each item's shape (:meth:`out_shape`: square
    S, its own :meth:`rect_shape`, or its batch's after :meth:`set_batch_shapes`). The dataset sets
    ``rect``, ``stride``, ``imgsz`` and ``files``."""

    rect: bool
    stride: int
    imgsz: int
    files: list
    shapes: np.ndarray | None = None  # rect: (h, w) of each file, in the sorted order
    batch_shapes: np.ndarray | None = None  # rect: (H, W) of each item's batch (set_batch_shapes)

    def _sort_by_aspect(self, image_hw: object, prefix: str) -> None:
        """Sort ``files`` by h / w (stable), their (h, w) read by ``image_hw(file, prefix)``."""
        shapes = np.asarray([image_hw(f, prefix) for f in self.files], np.int64).reshape(-1, 2)  # type: ignore[operator]
        order = np.argsort(shapes[:, 0] / shapes[:, 1], kind="stable")
        self.files, self.shapes = [self.files[j] for j in order], shapes[order]

    def rect_shape(self, i: int) -> tuple[int, int]:
        """(H, W) of item ``i`` under ``rect``: the smallest multiple of ``stride`` around the image
        resized to a long side of S."""
        assert self.shapes is not None
        h0, w0 = (int(v) for v in self.shapes[i])
        r = self.imgsz / max(h0, w0)
        return (int(np.ceil(h0 * r / self.stride)) * self.stride, int(np.ceil(w0 * r / self.stride)) * self.stride)

    def set_batch_shapes(self, batch: int) -> np.ndarray:
        """``rect``: every item takes the shape of its chunk of ``batch`` consecutive items
        (:func:`rect_batch_shapes`); call before the loader's workers start."""
        if not self.rect or self.shapes is None:
            raise ConfigError("set_batch_shapes needs a rect=True dataset (images sorted by aspect ratio)")
        self.batch_shapes = rect_batch_shapes(self.shapes, imgsz=self.imgsz, batch=batch, stride=self.stride)
        return self.batch_shapes

    def out_shape(self, i: int) -> tuple[int, int]:
        """(H, W) of item ``i``: square S, its own rect shape, or its batch's."""
        if not self.rect:
            return self.imgsz, self.imgsz
        if self.batch_shapes is not None:
            return int(self.batch_shapes[i][0]), int(self.batch_shapes[i][1])
        return self.rect_shape(i)

