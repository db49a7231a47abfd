"""``-k <family>`` selects that family's in-process export tests of test_export_all_families.py
(the conftest moves every test whose id says "openvino" to a child process, so the in-process
test's id must not)."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

HERE = Path(__file__).resolve().parent


def test_k_family_selects_the_in_process_export_test() -> None:
    proc = subprocess.run([sys.executable, "-m", "pytest", "--collect-only", "-q", "-p", "no:cacheprovider",
                           str(HERE / "test_export_all_families.py"), "-k", "yolo9"],
                          capture_output=True, text=True, cwd=HERE.parents[2], timeout=300)
    ids = [ln for ln in proc.stdout.splitlines() if "::" in ln]
    assert any(i.endswith("[yolo9]") for i in ids), proc.stdout[-2000:] + proc.stderr[-2000:]
    assert all("yolo9" in i for i in ids)
