"""DataLoader construction for detection datasets: seeded shuffling, seeded workers.

Shuffling and augmentation are both functions of ``(seed, epoch)``. The loader's sampler
advances the dataset epoch itself when nobody else does: if the trainer calls
``ds.set_epoch(e)`` before each epoch, epoch ``e`` is used; if it never does, every new pass over
the loader moves to the next epoch, so augmentation never repeats by accident.
"""

from __future__ import annotations

import logging
import random
from collections.abc import Iterator
from typing import Any

import numpy as np
import torch
from torch.utils.data import DataLoader, Sampler

from ..errors import ConfigError
from .dataset import collate_detection

logger = logging.getLogger(__name__)


class EpochSampler(Sampler[int]):
    """Indices of ``dataset`` in order, or a permutation seeded by ``(seed, epoch)``.

    On each pass, reads the dataset's epoch; if it did not change since the previous pass,
    advances it by one (``dataset.set_epoch``) before yielding anything.
    """

    def __init__(self, dataset: Any, *, shuffle: bool, seed: int) -> None:
        self.dataset = dataset
        self.shuffle = shuffle
        self.seed = seed
        self._last_epoch: int | None = None

    def __len__(self) -> int:
        return len(self.dataset)

    def _next_epoch(self) -> int:
        epoch = int(getattr(self.dataset, "epoch", 0))
        if self._last_epoch is not None and epoch == self._last_epoch and hasattr(self.dataset, "set_epoch"):
            epoch += 1
            self.dataset.set_epoch(epoch)
        self._last_epoch = epoch
        return epoch

    def __iter__(self) -> Iterator[int]:
        epoch = self._next_epoch()
        n = len(self.dataset)
        if not self.shuffle:
            return iter(range(n))
        g = torch.Generator().manual_seed((self.seed * 1_000_003 + epoch) & 0x7FFFFFFFFFFFFFFF)
        return iter(torch.randperm(n, generator=g).tolist())


def seed_worker(worker_id: int) -> None:
    """DataLoader ``worker_init_fn``: seed python/numpy from torch's per-worker seed, keep cv2
    single-threaded inside workers (the workers are the parallelism)."""
    seed = torch.initial_seed() % 2**32
    random.seed(seed)
    np.random.seed(seed)
    try:
        import cv2
    except ImportError:  # the dataset says what to install when it first needs OpenCV
        return
    cv2.setNumThreads(0)


def build_dataloader(ds: Any, *, batch: int, workers: int, shuffle: bool, seed: int,
                     pin_memory: bool = True, sampler: Sampler | None = None,
                     drop_last: bool = False, collate_fn: Any = None,
                     batch_sampler: Sampler | None = None) -> DataLoader:
    """A DataLoader over a :class:`~libreyolo.data.dataset.DetectionDataset` with
    :func:`~libreyolo.data.dataset.collate_detection`.

    ``workers > 0`` uses persistent workers seeded by :func:`seed_worker`; ``pin_memory`` is
    applied only when CUDA is available. A custom ``sampler`` (e.g. a ``DistributedSampler``)
    replaces the built-in seeded one; then ``shuffle`` is the sampler's business and the
    caller sets epochs on it and on the dataset. ``collate_fn`` defaults to
    :func:`~libreyolo.data.dataset.collate_detection` (classification passes
    :func:`~libreyolo.data.classify.collate_classify`). A ``batch_sampler`` (e.g. the
    :class:`~libreyolo.data.batching.RectBatchSampler` of ``rect=True`` training) yields whole
    batches of indices: ``batch``, ``shuffle``, ``sampler`` and ``drop_last`` are then its business.

    Example:
        >>> loader = build_dataloader(ds, batch=16, workers=4, shuffle=True, seed=0)
        >>> batch = next(iter(loader)); batch["img"].shape
        torch.Size([16, 3, 640, 640])
    """
    for key, v, lo in (("batch", batch, 1), ("workers", workers, 0)):
        if isinstance(v, bool) or not isinstance(v, int) or v < lo:
            raise ConfigError(f"{key} must be an int >= {lo}, got {v!r}")
    if hasattr(ds, "set_seed"):
        ds.set_seed(seed)
    generator = torch.Generator().manual_seed(seed)
    common: dict[str, Any] = dict(num_workers=workers, pin_memory=bool(pin_memory and torch.cuda.is_available()),
                                  collate_fn=collate_fn or collate_detection,
                                  worker_init_fn=seed_worker if workers > 0 else None,
                                  persistent_workers=workers > 0, generator=generator)
    if batch_sampler is not None:
        return DataLoader(ds, batch_sampler=batch_sampler, **common)
    if sampler is None:
        sampler = EpochSampler(ds, shuffle=shuffle, seed=seed)
        if shuffle and getattr(ds, "rect", False):
            logger.warning("shuffle=True with a rect dataset mixes aspect ratios in a batch; "
                           "batches are padded to their largest image")
    return DataLoader(ds, batch_size=batch, sampler=sampler, drop_last=drop_last, **common)
