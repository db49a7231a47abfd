"""``LIBREYOLO_KERNELS=off`` must not even import the accelerated providers (SPEC K-4)."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[3]
PROVIDERS = ("libreyolo.kernels.quant.simulate", "libreyolo.kernels.quant.execute",
             "libreyolo.kernels.attention.msda_triton", "libreyolo.kernels.attention.msda_hub", "triton")

SCRIPT = """
import json, sys, torch
PROVIDERS = PROVIDERS_REPR
import libreyolo.kernels as kernels
at_import = [m for m in PROVIDERS if m in sys.modules]
from libreyolo.quant import compute_scale, pack_weight
from libreyolo.kernels.quant.dispatch import fake_quant, unpack_weight
x = torch.randn(64)
y = fake_quant(x, compute_scale(x, fmt="fp8"), fmt="fp8")
p = pack_weight(torch.randn(4, 8), fmt="int8")
unpack_weight(p.data, p.scale)
act = kernels.active()
print(json.dumps({"active": act, "at_import": at_import,
                  "modules": [m for m in PROVIDERS if m in sys.modules]}))
"""


def _run(env_extra: dict[str, str]) -> dict:
    env = {k: v for k, v in os.environ.items()
           if k not in ("LIBREYOLO_KERNELS", "LIBREYOLO_QUANT_KERNELS", "TRITON_INTERPRET")}
    env.update(env_extra)
    env["PYTHONPATH"] = str(ROOT) + os.pathsep + env.get("PYTHONPATH", "")
    script = SCRIPT.replace("PROVIDERS_REPR", repr(PROVIDERS))
    out = subprocess.run([sys.executable, "-c", script], env=env, cwd=ROOT, capture_output=True,
                         text=True, timeout=120)
    assert out.returncode == 0, out.stderr[-2000:]
    return json.loads(out.stdout.strip().splitlines()[-1])


@pytest.mark.parametrize("env", [{"LIBREYOLO_KERNELS": "off"},
                                 {"LIBREYOLO_QUANT_KERNELS": "reference"}])
def test_off_imports_no_provider(env):
    res = _run(env)
    assert res["modules"] == []
    assert res["active"]["fake_quant_fp8"] == "reference"
    assert res["active"]["fp8_gemm"] == "unavailable"


def test_default_imports_providers_lazily():
    pytest.importorskip("triton")
    res = _run({})
    assert res["at_import"] == []  # importing the package imports no provider
    assert "libreyolo.kernels.quant.simulate" in res["modules"]
    assert "libreyolo.kernels.quant.execute" in res["modules"]
