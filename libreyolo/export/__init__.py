"""Export: one module per format, found through the format registry (:mod:`.registry`).

``export(model, overrides)`` is what ``Model.export`` calls. Exported graphs always carry the
portable math (SPEC K-6, K-9): kernel predicates decline while tracing or exporting and the
fused-attention policy keeps the explicit equation.
"""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING, Any

from ..errors import ExportError
from .config import ExportConfig
from .registry import format_names, get_format

if TYPE_CHECKING:
    from ..models._base.family import Family

FORMATS = format_names()


def export(model: Family, overrides: dict[str, Any]) -> Path:
    """Export ``model`` as ``overrides`` say (keys of :class:`ExportConfig`); returns the path."""
    cfg = ExportConfig.from_overrides(overrides, default_imgsz=model.imgsz)
    refused = dict(getattr(model, "EXPORT_REFUSALS", {}) or {}).get(cfg.format)
    if refused:  # a format whose converter cannot hold an operator of this family's network
        raise ExportError(f"{model.FAMILY} cannot export to {cfg.format}: {refused}")
    return get_format(cfg.format).load_exporter()(model, cfg)


__all__ = ["FORMATS", "ExportConfig", "export", "format_names", "get_format"]
