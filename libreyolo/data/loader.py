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


# Validation sets at most this large (bytes of collated tensors) are kept in host memory after
# their first pass (:class:`BatchCache`): a COCO-sized set (5,000 images) streams as before.
VAL_CACHE_BYTES = 1 << 30


def batch_nbytes(batch: Any) -> int:
    """Bytes held by the tensors / arrays of a collated batch (a dict, list or tuple, nested)."""
    if isinstance(batch, torch.Tensor):
        return batch.numel() * batch.element_size()
    if isinstance(batch, np.ndarray):
        return int(batch.nbytes)
    if isinstance(batch, dict):
        return sum(batch_nbytes(v) for v in batch.values())
    if isinstance(batch, (list, tuple)):
        return sum(batch_nbytes(v) for v in batch)
    return 0


class BatchCache:
    """A loader whose batches are kept after the first complete pass, when they fit in ``max_bytes``.

    For a loader that yields the same batches on every pass (no shuffling, no augmentation: the
    validation loader), the later passes replay the kept batches instead of decoding, letterboxing,
    collating and pinning every image again in the workers. Validation then no longer waits for
    its data: on a small set that wait was most of its time. A pass that was stopped early keeps
    nothing; a set larger than ``max_bytes`` streams from the loader on every pass, as before.
    Consumers read the batches and must not modify them in place (the validator and the scorers
    only read them; ``img`` is converted into a new tensor).

    Example:
        >>> cache = BatchCache([{"img": torch.zeros(2, 3)}, {"img": torch.ones(2, 3)}], max_bytes=1 << 20)
        >>> [b["img"].sum().item() for b in cache], cache.cached
        ([0.0, 6.0], True)
    """

    def __init__(self, loader: Any, *, max_bytes: int = VAL_CACHE_BYTES) -> None:
        self.loader = loader
        self.max_bytes = int(max_bytes)
        self.batches: list[Any] | None = None
        self.too_large = False

    @property
    def cached(self) -> bool:
        return self.batches is not None

    @property
    def dataset(self) -> Any:
        return getattr(self.loader, "dataset", None)

    def __len__(self) -> int:
        return len(self.batches) if self.batches is not None else len(self.loader)

    def __iter__(self) -> Iterator[Any]:
        if self.batches is not None:
            yield from self.batches
            return
        kept: list[Any] | None = None if self.too_large else []
        size = 0
        for batch in self.loader:
            if kept is not None:
                size += batch_nbytes(batch)
                if size > self.max_bytes:
                    self.too_large, kept = True, None
                    logger.debug("validation batches exceed %d MiB: streamed every epoch", self.max_bytes >> 20)
                else:
                    kept.append(batch)
            yield batch
        if kept is not None:  # reached only when the pass completed
            self.batches = kept
