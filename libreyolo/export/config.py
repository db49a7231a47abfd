"""Export options."""

from __future__ import annotations

from dataclasses import dataclass, fields
from pathlib import Path
from typing import Any

from ..errors import ExportError, check_keys, suggest

DEFAULT_OPSET = 17


@dataclass(frozen=True, kw_only=True)
class ExportConfig:
    """Options of ``model.export(...)`` / ``libreyolo export``.

    format: only ``"onnx"`` today. imgsz: input size (int or (h, w)); batch: batch size of the
    traced input; dynamic: make batch, height and width dynamic axes (as far as the family
    allows); opset: ONNX opset; half: float16 weights and input (CUDA only); simplify: run
    ``onnxslim`` over the graph when installed; file: output path (default next to the weights,
    else ``<family><size>.onnx`` in the working directory).
    """

    format: str = "onnx"
    imgsz: int | tuple[int, int] = 640
    batch: int = 1
    dynamic: bool = False
    opset: int = DEFAULT_OPSET
    half: bool = False
    simplify: bool = False
    device: str | None = None
    file: str | None = None

    @classmethod
    def from_overrides(cls, overrides: dict[str, Any], *, default_imgsz: int) -> ExportConfig:
        names = [f.name for f in fields(cls)]
        check_keys(overrides, names, what="export")
        values = {"imgsz": default_imgsz, **overrides}
        fmt = str(values.get("format", "onnx")).lower()
        if fmt not in ("onnx",):
            raise ExportError(f"unknown export format {fmt!r}.{suggest(fmt, ['onnx'])} Supported formats: onnx")
        values["format"] = fmt
        batch = values.get("batch", 1)
        if isinstance(batch, bool) or not isinstance(batch, int) or batch < 1:
            raise ExportError(f"batch must be a positive int, got {batch!r}")
        opset = values.get("opset", DEFAULT_OPSET)
        if isinstance(opset, bool) or not isinstance(opset, int) or not 11 <= opset <= 23:
            raise ExportError(f"opset must be an int in [11, 23], got {opset!r}")
        if values.get("file") is not None:
            values["file"] = str(Path(values["file"]))
        return cls(**values)
