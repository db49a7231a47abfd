"""libreyolo: real-time vision models with honest speed.

Public API: :func:`LibreYOLO`, :data:`SAMPLE_IMAGE`, :class:`Results`, ``__version__``. Heavy
modules are imported lazily; importing the package touches no environment variable, CUDA
context or network.
"""

from __future__ import annotations

from typing import Any

from ._version import __version__

__all__ = ["LibreYOLO", "SAMPLE_IMAGE", "Results", "__version__"]


def __getattr__(name: str) -> Any:
    if name == "LibreYOLO":
        from .model import LibreYOLO

        return LibreYOLO
    if name == "SAMPLE_IMAGE":
        from .assets import SAMPLE_IMAGE

        return SAMPLE_IMAGE
    if name == "Results":
        from .engine.results import Results

        return Results
    raise AttributeError(f"module 'libreyolo' has no attribute {name!r}")
