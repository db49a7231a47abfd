"""Every family with a decode (``DECODE_TOPK``) exports it, and its NMS, inside the ONNX graph.

Untrained networks score many candidates nearly alike, so the decode is compared as sets of
rows (:func:`export_helpers.assert_same_rows`) against the family's own ``decode`` in PyTorch;
the NMS graph is compared with the eager selection applied to the ONNX Runtime candidates of the
same network, so near-ties cannot make the two pick differently.
"""

from __future__ import annotations

from pathlib import Path

import pytest
import torch
from export_helpers import assert_same_rows

pytest.importorskip("onnx", reason="the onnx extra is part of the CI environment")
pytest.importorskip("onnxruntime")

from libreyolo import LibreYOLO  # noqa: E402
from libreyolo.model import Model
from libreyolo.ops.candidates import select_detections  # noqa: E402
from libreyolo.registry import families  # noqa: E402

FAMS = sorted((n, f) for n, f in families().items() if f.DECODE_TOPK)
SIZE = 64


@pytest.fixture
def portable(monkeypatch: pytest.MonkeyPatch):
    """PyTorch runs the portable math the export holds (SPEC K-6): ``LIBREYOLO_KERNELS=off``. It
    also keeps the Triton CPU interpreter of the test environment out of the eager reference."""
    from libreyolo import kernels

    monkeypatch.setenv("LIBREYOLO_KERNELS", "off")
    kernels.clear_cache()
    yield
    monkeypatch.undo()
    kernels.clear_cache()


@pytest.mark.parametrize("name,fam", FAMS, ids=[n for n, _ in FAMS])
def test_decode_and_nms_inside_onnx_match_pytorch(name: str, fam: type, tmp_path: Path, portable) -> None:
    torch.manual_seed(0)
    model = Model(fam(size=fam.SIZES[0], nc=3))
    s = -(-SIZE // model.stride) * model.stride  # 64 px, or a fixed-input family's own size (yolo1: 448)
    dec = LibreYOLO(model.export(format="onnx", imgsz=s, decode=True, dynamic=True,
                                     file=str(tmp_path / "d.onnx")))
    nms = LibreYOLO(model.export(format="onnx", imgsz=s, nms=True, conf=0.0, max_det=50,
                                     file=str(tmp_path / "n.onnx")))
    x = torch.rand(2, 3, s, s)
    model.fuse()
    with torch.no_grad():
        ref = model.decode(model.eager_forward(x))
    (cands,) = dec.forward(x)  # batch 2 through the batch-1 export: dynamic batch
    assert cands.shape == ref.shape and cands.shape[-1] == 6
    for b in range(2):
        assert_same_rows(cands[b], ref[b], box_tol=1e-2)
    (dets,) = nms.forward(x)
    assert dets.shape == (2, min(50, cands.shape[1]), 6)
    want = select_detections(cands, conf=0.0, iou=0.7, max_det=50, agnostic=False, nms=fam.DECODE_NMS)
    for b in range(2):
        n = len(want[b])
        assert n > 0 and not dets[b, n:].any()
        assert_same_rows(dets[b, :n], want[b], box_tol=1e-3, score_tol=1e-5)


@pytest.mark.parametrize("name,fam", FAMS, ids=[n for n, _ in FAMS])
def test_decode_inside_openvino_and_nms_inside_torchscript_match_pytorch(name: str, fam: type, tmp_path: Path,
                                                                        portable) -> None:
    pytest.importorskip("openvino", reason="installed by the README test command (the openvino extra)")
    torch.manual_seed(0)
    model = Model(fam(size=fam.SIZES[0], nc=3))
    s = -(-SIZE // model.stride) * model.stride  # 64 px, or a fixed-input family's own size (yolo1: 448)
    ov_dec = LibreYOLO(model.export(format="openvino", imgsz=s, decode=True, dynamic=True,
                                        file=str(tmp_path / "d")))
    ts_nms = LibreYOLO(model.export(format="torchscript", imgsz=s, nms=True, conf=0.0, max_det=50,
                                        dynamic=True, file=str(tmp_path / "n")))
    x = torch.rand(2, 3, s, s)
    model.fuse()
    with torch.no_grad():
        ref = model.decode(model.eager_forward(x))
    (cands,) = ov_dec.forward(x)
    assert cands.shape == ref.shape
    for b in range(2):
        assert_same_rows(cands[b], ref[b], box_tol=1e-2)
    (dets,) = ts_nms.forward(x)  # TorchScript runs PyTorch's kernels: the eager selection of ref
    want = select_detections(ref, conf=0.0, iou=0.7, max_det=50, agnostic=False, nms=fam.DECODE_NMS)
    for b in range(2):
        n = len(want[b])
        assert n > 0 and not dets[b, n:].any()
        assert_same_rows(dets[b, :n], want[b], box_tol=1e-4, score_tol=1e-6)
