"""The measurement harness behind ``libreyolo benchmark`` (SPEC G-10, DESIGN convention 13).

Public entry point: :func:`run_benchmark`; :func:`format_table` renders its result.
"""

from __future__ import annotations

from typing import Any

__all__ = ["run_benchmark", "format_table", "evaluate_targets"]


def __getattr__(name: str) -> Any:
    if name == "run_benchmark":
        from .run import run_benchmark

        return run_benchmark
    if name in ("format_table", "evaluate_targets"):
        from . import report

        return getattr(report, name)
    raise AttributeError(f"module 'libreyolo.bench' has no attribute {name!r}")
