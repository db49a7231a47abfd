"""The per-pixel-map methods of :class:`~libreyolo.engine.results.Results` (semantic class maps and
depth maps), kept apart so that ``results.py`` stays small: writing each map in its dataset's
format and applying a function to whichever maps a result holds.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import numpy as np  # noqa: F401 - the docstring examples use it
import torch  # noqa: F401 - the docstring examples use it

from ..errors import ConfigError


class MapsMixin:
    """``save_mask`` / ``save_depth`` / ``save_alpha`` and the map helper of :class:`~libreyolo.engine.results.Results`."""

    semantic: Any
    depth: Any
    alpha: Any

    def _maps(self, fn: Any) -> dict[str, Any]:
        """``fn`` applied to the per-pixel maps this result has (``semantic``, ``depth``, ``alpha``)."""
        return {k: fn(getattr(self, k)) for k in ("semantic", "depth", "alpha") if getattr(self, k) is not None}

    def save_mask(self, file: str | Path) -> Path:
        """Write :attr:`semantic` as a single-channel PNG of class ids (the dataset mask format).

        Example:
            >>> from libreyolo.engine.results import Results
            >>> r = Results(orig_img=np.zeros((4, 6, 3), np.uint8), names={0: "a", 1: "b"}, semantic=torch.ones(4, 6, dtype=torch.int64))
            >>> import tempfile; r.save_mask(Path(tempfile.mkdtemp()) / "mask.png").suffix, r.verbose()
            ('.png', 'b 100%')
        """
        if self.semantic is None:
            raise ConfigError("save_mask() needs a semantic-segmentation result (Results.semantic is None)")
        from .semantic_io import save_mask

        return save_mask(self, file)

    def save_depth(self, file: str | Path) -> Path:
        """Write :attr:`depth` as a float32 ``.npy`` array; :meth:`summary` then names the file.

        Example:
            >>> from libreyolo.engine.results import Results
            >>> r = Results(orig_img=np.zeros((4, 6, 3), np.uint8), names={0: "depth"}, depth=torch.ones(4, 6))
            >>> import tempfile; r.save_depth(Path(tempfile.mkdtemp()) / "d.npy").suffix, r.summary()[0]["max"]
            ('.npy', 1.0)
        """
        if self.depth is None:
            raise ConfigError("save_depth() needs a depth result (Results.depth is None)")
        from .depth_io import save_depth

        return save_depth(self, file)

    def save_alpha(self, file: str | Path) -> Path:
        """Write :attr:`alpha` as an 8-bit single-channel PNG (the matte dataset format); :meth:`summary`
        then names the file.

        Example:
            >>> from libreyolo.engine.results import Results
            >>> r = Results(orig_img=np.zeros((4, 6, 3), np.uint8), names={0: "foreground"}, alpha=torch.ones(4, 6))
            >>> import tempfile; r.save_alpha(Path(tempfile.mkdtemp()) / "a.png").suffix, r.summary()[0]["foreground"]
            ('.png', 1.0)
        """
        if self.alpha is None:
            raise ConfigError("save_alpha() needs a matte result (Results.alpha is None)")
        from .matte_io import save_alpha

        return save_alpha(self, file)
