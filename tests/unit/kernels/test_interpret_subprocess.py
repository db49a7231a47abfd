"""Run the Triton parity tests in a fresh process with ``TRITON_INTERPRET=1`` set from the start.

In-process, interpreter mode depends on nothing having imported triton before the variable was
set; a fresh process does not. Skipped when the tests already ran interpreted in this process.
"""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

from libreyolo.kernels.quant.interpret import kernels_interpreted

ROOT = Path(__file__).resolve().parents[3]


@pytest.mark.skipif(kernels_interpreted(), reason="test_triton_quant.py already ran under the interpreter here")
def test_triton_quant_parity_in_fresh_process():
    pytest.importorskip("triton")
    env = dict(os.environ, TRITON_INTERPRET="1", CUDA_VISIBLE_DEVICES="")
    env.pop("LIBREYOLO_KERNELS", None)
    env.pop("LIBREYOLO_QUANT_KERNELS", None)
    out = subprocess.run(
        [sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider",
         str(Path(__file__).with_name("test_triton_quant.py"))],
        env=env, cwd=ROOT, capture_output=True, text=True, timeout=600,
    )
    tail = out.stdout[-3000:] + out.stderr[-2000:]
    assert out.returncode == 0, tail
    assert " passed" in out.stdout and "skipped" not in out.stdout.splitlines()[-1], tail
