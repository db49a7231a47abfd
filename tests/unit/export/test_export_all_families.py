"""Every registered family exports its raw outputs to TorchScript and OpenVINO, and both runtimes
match the portable PyTorch forward (TorchScript 1e-5, OpenVINO 1e-3; the ONNX counterpart is
``tests/contract/test_export_contract.py``)."""

from __future__ import annotations

from pathlib import Path

import pytest
import torch

from libreyolo import LibreYOLO
from libreyolo.errors import ExportError
from libreyolo.model import Model
from libreyolo.registry import families

FAMS = sorted(families().items())
TOL = {"torchscript": 1e-5, "openvino": 1e-3}


@pytest.fixture
def portable(monkeypatch: pytest.MonkeyPatch):
    """PyTorch runs the portable math the export holds (SPEC K-6), outside the Triton interpreter."""
    from libreyolo import kernels

    monkeypatch.setenv("LIBREYOLO_KERNELS", "off")
    kernels.clear_cache()
    yield
    monkeypatch.undo()
    kernels.clear_cache()


def _check_runtime(fmt: str, name: str, fam: type, tmp_path: Path) -> None:
    torch.manual_seed(0)
    model = Model(fam(size=fam.SIZES[0], nc=3))
    s = -(-64 // model.stride) * model.stride  # 64 px, or the next multiple of a stride that does not divide it
    refusals = dict(getattr(fam, "EXPORT_REFUSALS", {}))
    if fmt in refusals:  # a converter without an operator the family needs: refused with the reason
        with pytest.raises(ExportError, match=f"cannot export to {fmt}"):
            model.export(format=fmt, imgsz=s, file=str(tmp_path / fmt))
        assert refusals[fmt].strip()
        return
    loaded = LibreYOLO(model.export(format=fmt, imgsz=s, file=str(tmp_path / fmt)))
    x = torch.rand(1, 3, s, s)
    model.fuse()
    ref = model.eager_forward(x)
    ref = list(ref) if isinstance(ref, (list, tuple)) else [ref]
    if fam.OUTPUT_KIND == "ocr":  # the export holds the detector; recognition runs eager in PyTorch only
        ref = ref[:1]
    assert loaded.FAMILY == name and loaded.names == model.names
    got = loaded.forward(x)
    assert len(got) == len(ref), fmt
    for a, b in zip(ref, got, strict=True):
        assert a.shape == b.shape, fmt
        assert torch.allclose(a.float(), b, rtol=TOL[fmt], atol=TOL[fmt]), (fmt, float((a.float() - b).abs().max()))


# Two tests, not one with both runtimes: the conftest moves every test whose id says "openvino" to a
# process of its own, so a test named for both left nothing for ``-k <family>`` to select in-process.
@pytest.mark.parametrize("name,fam", FAMS, ids=[n for n, _ in FAMS])
def test_raw_outputs_through_torchscript(name: str, fam: type, tmp_path: Path, portable) -> None:
    _check_runtime("torchscript", name, fam, tmp_path)


@pytest.mark.parametrize("name,fam", FAMS, ids=[n for n, _ in FAMS])
def test_raw_outputs_through_openvino(name: str, fam: type, tmp_path: Path, portable) -> None:
    pytest.importorskip("onnx")
    pytest.importorskip("openvino")
    _check_runtime("openvino", name, fam, tmp_path)
