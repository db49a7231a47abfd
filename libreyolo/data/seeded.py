"""The trainer's dataset interface the per-task datasets share (classification, pose, instance
segmentation and the map datasets of :mod:`.maps`): ``set_epoch`` / ``set_seed`` write a
shared-memory state tensor ``[epoch, seed, ...]`` so that the loader's workers see them, and an
item's random generator is a pure function of ``(seed, epoch, index)``. No mosaic unless a
subclass says otherwise (``mosaic_enabled`` / ``close_mosaic``)."""

from __future__ import annotations

import numpy as np
import torch
from torch.utils.data import Dataset


class SeededDataset(Dataset):
    """Base of a dataset the trainer seeds per epoch; a subclass calls :meth:`_init_state`."""

    _state: torch.Tensor  # epoch, seed, then what a subclass keeps (segment: mosaic on)

    def _init_state(self, *extra: int) -> None:
        """The shared state ``[0, 0, *extra]`` (epoch, seed, extra), in shared memory (reaches workers)."""
        self._state = torch.tensor([0, 0, *extra], dtype=torch.int64).share_memory_()

    def set_epoch(self, epoch: int) -> None:
        self._state[0] = int(epoch)

    def set_seed(self, seed: int) -> None:
        self._state[1] = int(seed)

    @property
    def epoch(self) -> int:
        return int(self._state[0])

    @property
    def mosaic_enabled(self) -> bool:
        return False

    def close_mosaic(self) -> None:
        """No mosaic for this dataset (the trainer's hook does nothing)."""

    def _rng(self, i: int) -> np.random.Generator:
        """The generator of item ``i`` this epoch: a pure function of ``(seed, epoch, i)``."""
        return np.random.default_rng([int(self._state[1]), int(self._state[0]), i])


class MosaicSeededDataset(SeededDataset):
    """A :class:`SeededDataset` that builds mosaics (instance segmentation, pose): the state's
    third slot says whether mosaic is still on; the subclass calls ``_init_state(int(on))``."""

    @property
    def mosaic_enabled(self) -> bool:
        return bool(self._state[2])

    def close_mosaic(self) -> None:
        """Stop building mosaics (the trainer calls it for the last ``close_mosaic`` epochs)."""
        self._state[2] = 0
