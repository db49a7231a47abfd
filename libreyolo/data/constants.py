"""Dataset constants shared by the data modules (a leaf: imports nothing of the package).

``config`` (the data yaml), ``labels`` (label indexing) and ``classify`` (class folders) all read
these; keeping them here lets ``config`` import the others without an import cycle.
"""

from __future__ import annotations

#: file suffixes read as images (lower case).
IMG_SUFFIXES = frozenset({".jpg", ".jpeg", ".png", ".bmp", ".tif", ".tiff", ".webp"})

#: built-in detection datasets, generated on first use (``data="shapes"``).
BUILTIN = ("shapes",)
