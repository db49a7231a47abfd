"""Prediction backed by ONNX Runtime: ``LibreYOLO("model.onnx")``.

The returned object has the same ``predict``/``__call__``/``val`` API and Results as a PyTorch
model (:class:`~libreyolo.backends.exported.ExportedBackend`). The ONNX file's ``libreyolo`` metadata
restores family, size, class names, input size and what the graph returns (raw outputs decoded
by the family's eager postprocess, or the decode / NMS inside the graph).
"""

from __future__ import annotations

import json
import logging
from pathlib import Path
from typing import Any

from torch import Tensor

from ..errors import CheckpointError
from .exported import ExportedBackend

logger = logging.getLogger(__name__)


def read_metadata(path: str | Path) -> dict[str, Any]:
    try:
        import onnx
    except ImportError as e:
        raise CheckpointError('loading .onnx files needs the onnx extra: pip install "libreyolo[onnx]"') from e
    p = Path(path)
    if not p.is_file():
        raise CheckpointError(f"ONNX file {str(p)!r} does not exist")
    try:
        proto = onnx.load(str(p), load_external_data=False)
    except Exception as e:  # noqa: BLE001
        raise CheckpointError(f"cannot read {str(p)!r} as ONNX: {e}") from e
    props = {m.key: m.value for m in proto.metadata_props}
    if "libreyolo" not in props:
        raise CheckpointError(
            f"{str(p)!r} is not a libreyolo ONNX export (no 'libreyolo' metadata); export one with "
            "model.export(format='onnx')"
        )
    return json.loads(props["libreyolo"])


class OnnxBackend(ExportedBackend):
    """A model whose network runs in ONNX Runtime (CUDA provider when present, else CPU)."""

    FORMAT = "ONNX"

    def __init__(self, path: str | Path, *, device: str | None = None) -> None:
        meta = read_metadata(path)
        try:
            import onnxruntime as ort
        except ImportError as e:
            raise CheckpointError('ONNX Runtime is not installed: pip install "libreyolo[onnx]"') from e
        super().__init__(path, meta)
        available = ort.get_available_providers()
        want_cuda = device not in ("cpu",) and "CUDAExecutionProvider" in available
        providers = (["CUDAExecutionProvider"] if want_cuda else []) + ["CPUExecutionProvider"]
        self.session = ort.InferenceSession(str(path), providers=providers)
        self.input_name = self.session.get_inputs()[0].name
        self.output_names = [o.name for o in self.session.get_outputs()]
        logger.info("ONNX Runtime session on %s", self.session.get_providers()[0])

    def _run(self, x: Tensor) -> list[Tensor]:
        return self._as_tensors(self.session.run(self.output_names, {self.input_name: x.numpy()}))

    def __repr__(self) -> str:
        return f"OnnxBackend({self.path!r}, family={self.FAMILY!r}, head={self.head!r}, " \
               f"providers={self.session.get_providers()})"
