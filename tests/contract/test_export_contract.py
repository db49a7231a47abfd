"""Every registered family exports to ONNX with portable ops only, and ONNX Runtime matches eager."""

from __future__ import annotations

from pathlib import Path

import pytest
import torch

onnx = pytest.importorskip("onnx", reason="the onnx extra is part of the CI environment")
pytest.importorskip("onnxruntime")

from libreyolo import LibreYOLO  # noqa: E402
from libreyolo.export.onnx import portable_op_violations  # noqa: E402
from libreyolo.model import Model  # noqa: E402
from libreyolo.registry import families  # noqa: E402

FAMS = sorted(families().items())


@pytest.mark.parametrize("name,fam", FAMS, ids=[n for n, _ in FAMS])
def test_export_portable_and_onnxruntime_parity(name: str, fam: type, tmp_path: Path) -> None:
    torch.manual_seed(0)
    model = Model(fam(size=fam.SIZES[0], nc=3))
    s = -(-64 // model.stride) * model.stride  # 64 px, or the next multiple of a stride that does not divide it
    path = model.export(format="onnx", imgsz=s, file=str(tmp_path / f"{name}.onnx"))
    assert portable_op_violations(onnx.load(str(path))) == []
    loaded = LibreYOLO(str(path))
    assert loaded.FAMILY == name and loaded.names == model.names
    x = torch.rand(1, 3, s, s)
    model.fuse()
    ref = model.eager_forward(x)
    ref = list(ref) if isinstance(ref, (list, tuple)) else [ref]
    got = loaded.forward(x)
    assert len(got) == len(ref)
    for a, b in zip(ref, got, strict=True):
        assert a.shape == b.shape
        assert torch.allclose(a.float(), b, rtol=1e-3, atol=1e-3), float((a.float() - b).abs().max())
    # the user path too: predict through ONNX Runtime fills the same Results fields as PyTorch
    import numpy as np

    img = np.random.default_rng(0).integers(0, 255, (48, 80, 3), dtype=np.uint8)
    (pt,) = model.predict(img, imgsz=s)
    (ox,) = loaded.predict(img, imgsz=s)
    assert (pt.boxes is None) == (ox.boxes is None) and (pt.probs is None) == (ox.probs is None)
    assert (pt.semantic is None) == (ox.semantic is None)
    assert (getattr(pt, "masks", None) is None) == (getattr(ox, "masks", None) is None)
    if getattr(pt, "masks", None) is not None:  # instance segmentation: one mask per box at the image size
        assert ox.masks.shape == (len(ox.boxes), 48, 80) and pt.masks.shape == (len(pt.boxes), 48, 80)
    if pt.semantic is not None:  # semantic segmentation: the same class map (ties of near-equal logits aside)
        assert ox.semantic.shape == pt.semantic.shape == (48, 80)
        assert float((ox.semantic == pt.semantic).float().mean()) > 0.999
    elif pt.probs is not None:  # classification: the same distribution
        assert torch.allclose(pt.probs.data, ox.probs.data, atol=1e-3)
    else:
        assert ox.boxes.data.shape[1] == 6 and ox.orig_shape == pt.orig_shape == (48, 80)
