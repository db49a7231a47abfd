"""OpenCV is optional: prediction on images, drawing and saving fall back to Pillow without it;
training, datasets and video need it and say so in one line.

``opencv-python`` and ``opencv-python-headless`` both install the ``cv2`` package, so a library
that pins one of them breaks an environment that has the other (Ultralytics and many GUI tools
install ``opencv-python``). libreyolo therefore depends on neither: ``pip install
"libreyolo[cv]"`` adds the headless build, and any ``cv2`` already there is used as it is.

Example:
    >>> from libreyolo._cv import have_cv2
    >>> isinstance(have_cv2(), bool)
    True
"""

from __future__ import annotations

import importlib
from typing import Any

from .errors import MissingDependencyError

INSTALL_HINT = 'pip install "libreyolo[cv]" (or opencv-python / opencv-python-headless)'


def have_cv2() -> bool:
    """Whether ``import cv2`` works here (checked on each call: tests may hide it)."""
    try:
        importlib.import_module("cv2")
    except ImportError:
        return False
    return True


def require_cv2(what: str) -> Any:
    """The ``cv2`` module, or :class:`MissingDependencyError` naming ``what`` needs it."""
    try:
        return importlib.import_module("cv2")
    except ImportError as e:
        raise MissingDependencyError(f"{what} needs OpenCV, which is not installed: {INSTALL_HINT}") from e


class _LazyCV2:
    """Stands in for ``cv2`` in modules that use it throughout (datasets, augmentation): importing
    them never fails; the first use without OpenCV raises :class:`MissingDependencyError`."""

    def __getattr__(self, name: str) -> Any:
        return getattr(require_cv2("training data loading and augmentation"), name)


cv2: Any = _LazyCV2()
