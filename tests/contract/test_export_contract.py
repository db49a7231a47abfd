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
    restore = model.OUTPUT_KIND == "restore"  # restoration predicts each image at its own size: a dynamic export
    path = model.export(format="onnx", imgsz=s, file=str(tmp_path / f"{name}.onnx"), **({"dynamic": True} if restore else {}))
    assert portable_op_violations(onnx.load(str(path))) == []
    loaded = LibreYOLO(str(path))
    assert loaded.FAMILY == name and loaded.names == model.names
    x = torch.rand(1, 3, s, s)
    model.fuse()
    ref = model.eager_forward(x)
    ref = list(ref) if isinstance(ref, (list, tuple)) else [ref]
    if fam.OUTPUT_KIND == "ocr":  # the export holds the detector; recognition runs eager in PyTorch only
        ref = ref[:1]
    got = loaded.forward(x)
    assert len(got) == len(ref)
    for a, b in zip(ref, got, strict=True):
        assert a.shape == b.shape
        assert torch.allclose(a.float(), b, rtol=1e-3, atol=1e-3), float((a.float() - b).abs().max())
    # the user path too: predict through ONNX Runtime fills the same Results fields as PyTorch
    import numpy as np

    img = np.random.default_rng(0).integers(0, 255, (48, 80, 3), dtype=np.uint8)
    # a depth or matte export has a fixed input size (a ViT's position embedding resampled for the
    # traced grid; Swin windows padded for it), so both sides letterbox to the square export size
    fixed = fam.OUTPUT_KIND == "semantic" and "height" not in fam.EXPORT_DYNAMIC_AXES  # a ViT segmenter
    kw = {"rect": False} if fam.OUTPUT_KIND in ("depth", "matte") or fixed else {}
    (pt,) = model.predict(img, imgsz=s, **kw)
    (ox,) = loaded.predict(img, imgsz=s, **kw)
    assert (pt.boxes is None) == (ox.boxes is None) and (pt.probs is None) == (ox.probs is None)
    assert (pt.semantic is None) == (ox.semantic is None) and (pt.restored is None) == (ox.restored is None)
    assert (getattr(pt, "texts", None) is None) == (getattr(ox, "texts", None) is None)
    assert (pt.depth is None) == (ox.depth is None) and (pt.points is None) == (ox.points is None)
    assert (getattr(pt, "alpha", None) is None) == (getattr(ox, "alpha", None) is None)
    assert (getattr(pt, "masks", None) is None) == (getattr(ox, "masks", None) is None)
    if getattr(pt, "masks", None) is not None:  # instance segmentation: one mask per box at the image size
        assert ox.masks.shape == (len(ox.boxes), 48, 80) and pt.masks.shape == (len(pt.boxes), 48, 80)
    assert (getattr(pt, "keypoints", None) is None) == (getattr(ox, "keypoints", None) is None)
    if getattr(pt, "keypoints", None) is not None:  # pose: K keypoints per box, the same as PyTorch's
        k = int(model.nkpt)
        assert ox.keypoints.shape == (len(ox.boxes), k, 3) and pt.keypoints.shape == (len(pt.boxes), k, 3)
        if len(pt.boxes) == len(ox.boxes):
            assert torch.allclose(ox.keypoints.data, pt.keypoints.data, atol=1e-2)
    if getattr(pt, "alpha", None) is not None:  # matte: the same alpha at the image's size
        assert ox.alpha.shape == pt.alpha.shape == (48, 80)
        assert torch.allclose(ox.alpha, pt.alpha, rtol=1e-3, atol=1e-3)
    elif pt.depth is not None:  # depth: the same map at the image's size
        assert ox.depth.shape == pt.depth.shape == (48, 80)
        assert torch.allclose(ox.depth, pt.depth, rtol=1e-3, atol=1e-3)
    elif pt.points is not None:  # points: the same centroids (cells are thresholded, so compare at a margin)
        assert ox.orig_shape == pt.orig_shape == (48, 80) and ox.points.shape[1] == 4
        assert ox.points.shape == pt.points.shape and torch.allclose(ox.points, pt.points, atol=1e-2)
    elif pt.restored is not None:  # restoration: the same image (x scale), within float rounding
        assert ox.restored.shape == pt.restored.shape == (3, 48 * model.SCALE, 80 * model.SCALE)
        assert torch.allclose(ox.restored, pt.restored, atol=1e-3)
    elif pt.semantic is not None:  # semantic segmentation: the same class map (ties of near-equal logits aside)
        assert ox.semantic.shape == pt.semantic.shape == (48, 80)
        assert float((ox.semantic == pt.semantic).float().mean()) > 0.999
    elif getattr(pt, "texts", None) is not None:  # ocr: the same text regions (the export has no recogniser)
        assert ox.texts.polygons.shape == pt.texts.polygons.shape
        assert torch.allclose(ox.texts.polygons, pt.texts.polygons, atol=1e-2)
    elif pt.probs is not None:  # classification: the same distribution
        assert torch.allclose(pt.probs.data, ox.probs.data, atol=1e-3)
    else:
        assert ox.boxes.data.shape[1] == 6 and ox.orig_shape == pt.orig_shape == (48, 80)
