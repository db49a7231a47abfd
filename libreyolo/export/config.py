"""Export options."""

from __future__ import annotations

from dataclasses import dataclass, field, fields
from pathlib import Path
from typing import Any

from ..errors import ExportError, check_keys

DEFAULT_OPSET = 17


@dataclass(frozen=True, kw_only=True)
class ExportConfig:
    """Options of ``model.export(...)`` / ``libreyolo export``.

    format: a registered format (:mod:`libreyolo.export.registry`: ``onnx``, ``torchscript``,
    ``openvino``, ``ncnn``, ``executorch``). imgsz: input size (int or (h, w)); batch: batch size of the traced input;
    dynamic: make batch, height and width dynamic axes (as far as the family allows; with the
    decode inside only the batch); opset: ONNX opset (ONNX and OpenVINO); half: float16 weights
    and input (CUDA only); simplify: run ``onnxslim`` over the graph when installed; file:
    output path, given the format's suffix (default ``Libre<TOKEN><size>`` plus that suffix in
    the working directory, e.g. ``LibreYOLO9t.onnx``, ``LibreYOLO9t_openvino_model``).

    What the graph returns: by default the raw head outputs (the family's eager postprocess
    decodes them). ``decode=True`` puts the family's decode inside: one output
    ``candidates`` Tensor[B, k, 6] (x1, y1, x2, y2 in input pixels, score, class id) sorted by
    decreasing score, ``k`` the family's ``DECODE_TOPK``. ``nms=True`` (implies ``decode``) adds
    NMS at ``iou`` (class-aware unless ``agnostic_nms``) over candidates scoring above ``conf``:
    one output ``detections`` Tensor[B, max_det, 6], unused rows all zero.

    Each field's ``metadata["help"]`` is the line ``libreyolo export --help`` shows for it.
    """

    format: str = field(default="onnx", metadata={"help": "export format: onnx, torchscript, openvino, ncnn or executorch"})
    imgsz: int | tuple[int, int] = field(default=640, metadata={"help": "input size: 640 or h,w"})
    batch: int = field(default=1, metadata={"help": "batch size of the exported input"})
    dynamic: bool = field(default=False, metadata={"help": "dynamic batch/height/width axes"})
    opset: int = field(default=DEFAULT_OPSET, metadata={"help": "ONNX opset"})
    half: bool = field(default=False, metadata={"help": "float16 weights (CUDA)"})
    simplify: bool = field(default=False, metadata={"help": "simplify the graph"})
    device: str | None = field(default=None, metadata={"help": "device to trace on"})
    file: str | None = field(default=None, metadata={"help": "output file"})
    decode: bool = field(default=False, metadata={"help": "put the family's decode inside the graph (output candidates [B, k, 6])"})
    nms: bool = field(default=False, metadata={"help": "put decode and NMS inside the graph (output detections [B, max_det, 6])"})
    iou: float = field(default=0.7, metadata={"help": "NMS IoU threshold inside the graph (nms=true)"})
    conf: float = field(default=0.001, metadata={"help": "score threshold inside the graph (nms=true)"})
    max_det: int = field(default=300, metadata={"help": "detections per image inside the graph (nms=true)"})
    agnostic_nms: bool = field(default=False, metadata={"help": "class-agnostic NMS inside the graph (nms=true)"})

    @property
    def head(self) -> str:
        """What the exported graph returns: ``"raw"``, ``"decode"`` or ``"nms"``."""
        return "nms" if self.nms else "decode" if self.decode else "raw"

    @classmethod
    def from_overrides(cls, overrides: dict[str, Any], *, default_imgsz: int) -> ExportConfig:
        from .registry import get_format

        names = [f.name for f in fields(cls)]
        check_keys(overrides, names, what="export")
        values = {"imgsz": default_imgsz, **overrides}
        values["format"] = get_format(str(values.get("format", "onnx"))).name
        for key in ("batch", "max_det"):
            v = values.get(key, 1)
            if isinstance(v, bool) or not isinstance(v, int) or v < 1:
                raise ExportError(f"{key} must be a positive int, got {v!r}")
        opset = values.get("opset", DEFAULT_OPSET)
        if isinstance(opset, bool) or not isinstance(opset, int) or not 11 <= opset <= 23:
            raise ExportError(f"opset must be an int in [11, 23], got {opset!r}")
        for key in ("iou", "conf"):
            v = values.get(key, 0.5)
            if isinstance(v, bool) or not isinstance(v, (int, float)) or not 0.0 <= float(v) <= 1.0:
                raise ExportError(f"{key} must be a number in [0, 1], got {v!r}")
            if key in values:
                values[key] = float(v)
        for key in ("decode", "nms", "dynamic", "half", "simplify", "agnostic_nms"):
            if key in values and not isinstance(values[key], bool):
                raise ExportError(f"{key} must be true or false, got {values[key]!r}")
        if values.get("file") is not None:
            values["file"] = str(Path(values["file"]))
        return cls(**values)
