"""Execution-context probes shared by kernel predicates (tracing, compiling, export, capture)."""

from __future__ import annotations

import torch


def is_tracing() -> bool:
    return bool(torch.jit.is_tracing())


def is_compiling() -> bool:
    fn = getattr(getattr(torch, "compiler", None), "is_compiling", None)
    return bool(fn()) if fn is not None else False


def is_exporting() -> bool:
    fn = getattr(getattr(torch, "compiler", None), "is_exporting", None)
    return bool(fn()) if fn is not None else False


def is_onnx_exporting() -> bool:
    onnx = getattr(torch, "onnx", None)
    fn = getattr(onnx, "is_in_onnx_export", None)
    return bool(fn()) if fn is not None else False


def is_capturing() -> bool:
    """True while the current stream is capturing a CUDA graph."""
    if not torch.cuda.is_available() or not torch.cuda.is_initialized():
        return False
    return bool(torch.cuda.is_current_stream_capturing())


def execution_context() -> tuple[bool, bool, bool, bool, bool]:
    return (is_tracing(), is_compiling(), is_exporting(), is_onnx_exporting(), is_capturing())


def eager_only() -> bool:
    """True when running plain eager PyTorch: no tracing, compiling, exporting or ONNX export."""
    return not (is_tracing() or is_compiling() or is_exporting() or is_onnx_exporting())
