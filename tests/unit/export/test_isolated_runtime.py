"""The OpenVINO export tests, run in a pytest process of their own (see conftest.py for why)."""

from __future__ import annotations

import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

OPENVINO_CHILD = "LIBREYOLO_OPENVINO_CHILD"  # as in conftest.py

HERE = Path(__file__).resolve().parent


def test_isolated_runtime_tests_pass_in_a_process_of_their_own() -> None:
    if os.environ.get(OPENVINO_CHILD):
        pytest.skip("this is the child run itself")
    pytest.importorskip("openvino", reason="installed by the README test command (the openvino extra)")
    env = {**os.environ, OPENVINO_CHILD: "1"}
    proc = subprocess.run([sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", str(HERE), "-k", "openvino"],
                          capture_output=True, text=True, env=env, cwd=HERE.parents[2], timeout=1500)
    out = proc.stdout + proc.stderr
    assert proc.returncode == 0, out[-4000:]
    passed = int(m.group(1)) if (m := re.search(r"(\d+) passed", out)) else 0
    assert passed >= 20, out[-2000:]  # the OpenVINO parity tests really ran (28 at session J)
