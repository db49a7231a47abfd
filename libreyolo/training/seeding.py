"""Random seeds and the ``deterministic=True`` switches of a training run.

:func:`seed_all` seeds Python, NumPy and torch; :class:`Deterministic` turns deterministic
algorithms on for a run and puts the global flags back afterwards (also after a failure).
"""

from __future__ import annotations

import os
import random

import numpy as np
import torch


def seed_all(seed: int) -> None:
    """Seed Python's ``random``, NumPy's global generator and torch (all devices)."""
    random.seed(seed)
    np.random.seed(seed)
    torch.manual_seed(seed)


class Deterministic:
    """Deterministic algorithms for one run: :meth:`enable` saves the global flags and sets them,
    :meth:`restore` puts the saved ones back (a no-op when not enabled)."""

    def __init__(self) -> None:
        self.saved: tuple[bool, bool, bool, bool] | None = None

    def enable(self) -> None:
        self.saved = (torch.are_deterministic_algorithms_enabled(),
                      torch.is_deterministic_algorithms_warn_only_enabled(),
                      torch.backends.cudnn.deterministic, torch.backends.cudnn.benchmark)
        os.environ.setdefault("CUBLAS_WORKSPACE_CONFIG", ":4096:8")
        torch.use_deterministic_algorithms(True, warn_only=True)
        torch.backends.cudnn.deterministic = True
        torch.backends.cudnn.benchmark = False

    def restore(self) -> None:
        if self.saved is not None:
            det, warn_only, cudnn_det, cudnn_bench = self.saved
            torch.use_deterministic_algorithms(det, warn_only=warn_only)
            torch.backends.cudnn.deterministic, torch.backends.cudnn.benchmark = cudnn_det, cudnn_bench
            self.saved = None
