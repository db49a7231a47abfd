"""The model folder of an installed ``rapidocr_onnxruntime`` wheel (PaddleOCR's PP-OCR ONNX exports),
shared by the PP-OCR tests."""

from __future__ import annotations

from pathlib import Path

import pytest


def rapid_models() -> Path:
    """The model folder of an installed rapidocr_onnxruntime wheel (found, not imported: its
    runtime dependencies need not be installed), or skip."""
    import importlib.util

    spec = importlib.util.find_spec("rapidocr_onnxruntime")
    if spec is None or not spec.submodule_search_locations:
        pytest.skip("rapidocr_onnxruntime (which ships the PP-OCR ONNX models) is not installed; "
                    "pip install --no-deps rapidocr_onnxruntime==1.4.4")
    return Path(next(iter(spec.submodule_search_locations))) / "models"
