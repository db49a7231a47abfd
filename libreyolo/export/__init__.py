"""Export: one module per format. ``export(model, overrides)`` is what ``Family.export`` calls.

Exported graphs always carry the portable math (SPEC K-6, K-9): kernel predicates decline while
exporting and the fused-attention policy keeps the explicit equation.
"""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING, Any

from .config import ExportConfig

if TYPE_CHECKING:
    from ..models._base.family import Family

FORMATS = ("onnx",)


def export(model: Family, overrides: dict[str, Any]) -> Path:
    """Export ``model`` as ``overrides`` say (keys of :class:`ExportConfig`); returns the file path."""
    cfg = ExportConfig.from_overrides(overrides, default_imgsz=model.imgsz)
    if cfg.format == "onnx":
        from .onnx import export_onnx

        return export_onnx(model, cfg)
    raise AssertionError("unreachable: ExportConfig validates the format")  # pragma: no cover


__all__ = ["FORMATS", "ExportConfig", "export"]
