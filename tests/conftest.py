"""Shared test configuration: ``@pytest.mark.cuda`` tests skip cleanly where CUDA is absent."""

from __future__ import annotations

import os

import pytest
import torch

# Under pytest-xdist (the README's test command runs `-n auto`) every worker is a process of its
# own: split the cores between them, or torch's default of one thread per core in each worker
# oversubscribes the machine. Child processes the tests start (CLI runs, the OpenVINO child)
# inherit the setting.
if os.environ.get("PYTEST_XDIST_WORKER"):
    _cores = len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else (os.cpu_count() or 1)
    _share = max(1, _cores // max(1, int(os.environ.get("PYTEST_XDIST_WORKER_COUNT", "1"))))
    for _var in ("OMP_NUM_THREADS", "MKL_NUM_THREADS"):
        os.environ.setdefault(_var, str(_share))
    torch.set_num_threads(_share)

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
