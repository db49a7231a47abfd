"""Shared test configuration: ``@pytest.mark.cuda`` tests skip cleanly where CUDA is absent."""

from __future__ import annotations

import os

import pytest
import torch

# Triton fixes interpreter mode when it is imported / kernels are defined: ask for the CPU
# interpreter before any test module imports triton, on machines without CUDA only (CI). A GPU
# run compiles the kernels for real.
if not torch.cuda.is_available():
    os.environ.setdefault("TRITON_INTERPRET", "1")


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    if torch.cuda.is_available():
        return
    skip = pytest.mark.skip(reason="needs a CUDA GPU (none present)")
    for item in items:
        if "cuda" in item.keywords:
            item.add_marker(skip)
