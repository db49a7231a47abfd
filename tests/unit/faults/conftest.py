"""Helpers of the fault-injection suite: start ``_child.py``, wait for its READY point, SIGKILL it."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from collections.abc import Callable
from pathlib import Path

import pytest

CHILD = Path(__file__).with_name("_child.py")
REPO = Path(__file__).resolve().parents[3]


def child_env() -> dict[str, str]:
    env = {**os.environ, "OMP_NUM_THREADS": "1", "MKL_NUM_THREADS": "1", "PYTHONPATH": str(REPO)}
    env.pop("LIBREYOLO_DATASETS_DIR", None)
    return env


def kill_at(scenario: str, folder: Path, point: str = "", *, after_ready_s: float = 0.0,
            timeout_s: float = 60.0) -> None:
    """Run the child until it reports READY at ``point`` (plus ``after_ready_s``), then SIGKILL it."""
    folder.mkdir(parents=True, exist_ok=True)
    (folder / "READY").unlink(missing_ok=True)
    proc = subprocess.Popen([sys.executable, str(CHILD), scenario, str(folder), point], env=child_env(),
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    try:
        deadline = time.monotonic() + timeout_s
        while not (folder / "READY").exists():
            if proc.poll() is not None:
                out, err = proc.communicate()
                pytest.fail(f"child {scenario}/{point} exited {proc.returncode} before READY:\n{out}\n{err[-3000:]}")
            if time.monotonic() > deadline:
                pytest.fail(f"child {scenario}/{point} never reached READY")
            time.sleep(0.02)
        if after_ready_s:
            time.sleep(after_ready_s)
        os.kill(proc.pid, signal.SIGKILL)
        proc.wait(timeout=30)
        assert proc.returncode == -signal.SIGKILL, (proc.returncode, proc.communicate())
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
        (folder / "READY").unlink(missing_ok=True)


@pytest.fixture
def killer() -> Callable[..., None]:
    """killer(scenario, folder, point="", after_ready_s=0.0): see :func:`kill_at`."""
    return kill_at


def run_child(scenario: str, folder: Path) -> subprocess.CompletedProcess[str]:
    """Run the child to completion (scenarios that end by themselves, e.g. ``fsize``)."""
    folder.mkdir(parents=True, exist_ok=True)
    return subprocess.run([sys.executable, str(CHILD), scenario, str(folder)], env=child_env(),
                          capture_output=True, text=True, timeout=120)


@pytest.fixture
def child() -> Callable[..., subprocess.CompletedProcess[str]]:
    """child(scenario, folder): see :func:`run_child`."""
    return run_child
