"""Prediction CUDA-graph runner (placeholder: policy validation only; see issue 4)."""

from __future__ import annotations

from typing import Any

from ..errors import ConfigError


def check_policy(value: Any) -> Any:
    if value is False or value is True or (isinstance(value, str) and value == "auto"):
        return value
    raise ConfigError(f"cuda_graph must be False, True or 'auto', got {value!r}")
