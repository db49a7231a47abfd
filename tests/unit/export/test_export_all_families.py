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


@pytest.mark.parametrize("name,fam", FAMS, ids=[n for n, _ in FAMS])
def test_raw_outputs_through_torchscript_and_openvino(name: str, fam: type, tmp_path: Path, portable) -> None:
    torch.manual_seed(0)
    model = Model(fam(size=fam.SIZES[0], nc=3))
    formats = ["torchscript"]
    try:
        import onnx  # noqa: F401
        import openvino  # noqa: F401
    except ImportError:
        pass
    else:
        formats.append("openvino")
    s = -(-64 // model.stride) * model.stride  # 64 px, or the next multiple of a stride that does not divide it
    for fmt, why in dict(getattr(fam, "EXPORT_REFUSALS", {})).items():  # a converter without an operator it needs
        with pytest.raises(ExportError, match=f"cannot export to {fmt}"):
            model.export(format=fmt, imgsz=s, file=str(tmp_path / fmt))
        assert why.strip()
        formats = [f for f in formats if f != fmt]
    loaded = {f: LibreYOLO(model.export(format=f, imgsz=s, file=str(tmp_path / f))) for f in formats}
    x = torch.rand(1, 3, s, s)
    model.fuse()
    ref = model.eager_forward(x)
    ref = list(ref) if isinstance(ref, (list, tuple)) else [ref]
    for fmt, m in loaded.items():
        assert m.FAMILY == name and m.names == model.names
        got = m.forward(x)
        assert len(got) == len(ref), fmt
        for a, b in zip(ref, got, strict=True):
            assert a.shape == b.shape, fmt
            assert torch.allclose(a.float(), b, rtol=TOL[fmt], atol=TOL[fmt]), (fmt, float((a.float() - b).abs().max()))
