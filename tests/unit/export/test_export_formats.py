"""ONNX / TorchScript / OpenVINO exports, each with the three heads (raw outputs, decode inside,
decode + NMS inside): runtime output vs PyTorch on the CPU, and ``predict`` through the backend
vs PyTorch ``predict``.

Tolerances: TorchScript runs the same kernels as PyTorch (1e-5); ONNX Runtime and OpenVINO
(f32 inference hint) reorder float sums: raw outputs within 1e-3, boxes within 0.01 px of a
128 px input, scores within 1e-4. Candidates are compared as sets of rows where scores tie
(:func:`export_helpers.assert_same_rows`).
"""

from __future__ import annotations

from pathlib import Path

import pytest
import torch
from export_helpers import assert_same_rows, sample_batch

from libreyolo import SAMPLE_IMAGE, LibreYOLO
from libreyolo.errors import CheckpointError, ConfigError, ExportError
from libreyolo.ops.candidates import select_detections

SIZE = 128  # 336 anchors < the decode's top 1000: the candidates are every anchor, in score order
FORMATS = ["onnx", "torchscript", "openvino"]
HEADS = ["raw", "decode", "nms"]
NEEDS = {"onnx": ("onnx", "onnxruntime"), "torchscript": (), "openvino": ("onnx", "openvino")}
TOL = {"onnx": 1e-3, "torchscript": 1e-5, "openvino": 1e-3}
NMS_CONF = 0.05


def _need(fmt: str) -> None:
    for mod in NEEDS[fmt]:
        pytest.importorskip(mod, reason=f"the {fmt} test needs {mod} (installed by the README test command)")


@pytest.fixture(scope="module")
def exports(tmp_path_factory: pytest.TempPathFactory, trained):
    model, _ = trained
    folder = tmp_path_factory.mktemp("exports")
    made: dict[tuple[str, str], Path] = {}

    def get(fmt: str, head: str) -> Path:
        _need(fmt)
        if (fmt, head) not in made:
            kw = {"decode": head == "decode", "nms": head == "nms", "conf": NMS_CONF}
            made[fmt, head] = model.export(format=fmt, imgsz=SIZE, dynamic=True, file=str(folder / f"{head}"), **kw)
        return made[fmt, head]

    return get


@pytest.mark.parametrize("fmt", FORMATS)
@pytest.mark.parametrize("head", HEADS)
def test_runtime_output_matches_pytorch(fmt: str, head: str, exports, trained) -> None:
    _, twin = trained
    loaded = LibreYOLO(exports(fmt, head))
    assert loaded.head == head and loaded.FAMILY == "yolo9" and loaded.names == twin.names
    x = sample_batch(SIZE)  # batch 2 through a batch-1 export: the batch axis is dynamic
    with torch.no_grad():
        raw = twin.net(x)
        cands = twin.decode(raw)
    got = loaded.forward(x)
    tol = TOL[fmt]
    if head == "raw":
        assert len(got) == len(raw)
        for a, b in zip(raw, got, strict=True):
            assert a.shape == b.shape and torch.allclose(a, b, rtol=tol, atol=tol), float((a - b).abs().max())
        return
    (out,) = got
    if head == "decode":
        assert out.shape == cands.shape == (2, 336, 6)
        for b in range(2):
            assert_same_rows(out[b], cands[b], box_tol=max(tol, 1e-4) * 10)
        return
    want = select_detections(cands, conf=NMS_CONF, iou=0.7, max_det=300, agnostic=False)
    assert out.shape == (2, 300, 6)
    for b in range(2):
        n = len(want[b])
        assert n > 0 and not out[b, n:].any()  # exactly the survivors, then zero rows
        assert_same_rows(out[b, :n], want[b], box_tol=max(tol, 1e-4) * 10)


@pytest.mark.parametrize("fmt", FORMATS)
@pytest.mark.parametrize("head", HEADS)
def test_predict_through_the_backend_matches_pytorch(fmt: str, head: str, exports, trained) -> None:
    model, _ = trained
    loaded = LibreYOLO(exports(fmt, head))
    kw = dict(imgsz=SIZE, conf=0.25, rect=False)
    a = model.predict(SAMPLE_IMAGE, **kw)[0]
    b = loaded.predict(SAMPLE_IMAGE, **kw)[0]
    assert len(a) == len(b) > 0
    assert b.orig_shape == a.orig_shape
    assert_same_rows(b.boxes.data, a.boxes.data, box_tol=0.05)
    # classes= filters inside the backend too (the candidates carry their class)
    c = loaded.predict(SAMPLE_IMAGE, classes=[int(a.boxes.cls[0])], **kw)[0]
    assert len(c) and bool((c.boxes.cls == a.boxes.cls[0]).all())


def test_onnx_nms_graph_is_one_standard_node(exports) -> None:
    onnx = pytest.importorskip("onnx")
    from libreyolo.export.onnx import portable_op_violations

    proto = onnx.load(str(exports("onnx", "nms")))
    ops = [n.op_type for n in proto.graph.node]
    assert ops.count("NonMaxSuppression") == 1 and ops.count("TopK") == 2  # decode top-k, final top-k
    assert portable_op_violations(proto) == []
    assert [o.name for o in proto.graph.output] == ["detections"]


def test_openvino_folder_layout_and_xml_path(exports) -> None:
    folder = exports("openvino", "decode")
    assert folder.name.endswith("_openvino_model") and folder.is_dir()
    assert sorted(p.suffix for p in folder.iterdir()) == [".bin", ".json", ".xml"]
    via_xml = LibreYOLO(next(folder.glob("*.xml")))
    assert via_xml.head == "decode" and via_xml.nc == 6


def test_nms_export_warns_once_when_predict_asks_another_iou(exports, caplog) -> None:
    loaded = LibreYOLO(exports("torchscript", "nms"))
    with caplog.at_level("WARNING"):
        loaded.predict(SAMPLE_IMAGE, imgsz=SIZE, rect=False, iou=0.5)
        loaded.predict(SAMPLE_IMAGE, imgsz=SIZE, rect=False, iou=0.5)
    assert sum("iou=0.7" in r.getMessage() for r in caplog.records) == 1


def test_fixed_shape_torchscript_rejects_other_sizes(tmp_path, trained) -> None:
    model, _ = trained
    path = model.export(format="torchscript", imgsz=64, decode=True, file=str(tmp_path / "f"))
    loaded = LibreYOLO(path)
    assert path.suffix == ".torchscript" and loaded.fixed_hw == (64, 64) and loaded.fixed_batch == 1
    with pytest.raises(ConfigError, match="imgsz"):
        loaded.forward(torch.rand(1, 3, 96, 96))
    assert loaded.forward(torch.rand(3, 3, 64, 64))[0].shape[0] == 3  # batch 1 export: image by image


def test_export_errors_name_the_fix(tmp_path, trained) -> None:
    from libreyolo import LibreYOLO

    cls_model = LibreYOLO("LibreResNet18-cls.pt", pretrained=False, nc=4)
    with pytest.raises(ExportError, match="no decode"):
        cls_model.export(format="torchscript", decode=True, imgsz=64, file=str(tmp_path / "c"))
    plain = tmp_path / "plain.torchscript"
    torch.jit.save(torch.jit.trace(torch.nn.Conv2d(3, 3, 1), torch.rand(1, 3, 8, 8)), str(plain))
    with pytest.raises(CheckpointError, match="not a libreyolo TorchScript export"):
        LibreYOLO(plain)
    with pytest.raises(CheckpointError, match="does not exist"):
        LibreYOLO(tmp_path / "missing.torchscript")
    model, _ = trained
    ts = model.export(format="torchscript", imgsz=64, file=str(tmp_path / "m"))
    with pytest.raises(ExportError, match="already an exported TorchScript model"):
        LibreYOLO(ts).export(format="onnx")


def test_exported_classifier_predicts_through_torchscript(tmp_path) -> None:
    from libreyolo import LibreYOLO

    torch.manual_seed(0)
    model = LibreYOLO("LibreResNet18-cls.pt", pretrained=False, nc=4)
    loaded = LibreYOLO(model.export(format="torchscript", imgsz=64, file=str(tmp_path / "c")))
    a = model.predict(SAMPLE_IMAGE, imgsz=64)[0]
    b = loaded.predict(SAMPLE_IMAGE, imgsz=64)[0]
    assert b.probs is not None and a.probs.top1 == b.probs.top1
    assert torch.allclose(a.probs.data, b.probs.data, atol=1e-5)


def test_track_through_an_export_keeps_ids(exports, trained) -> None:
    model, _ = trained
    loaded = LibreYOLO(exports("torchscript", "nms"))
    kw = dict(imgsz=SIZE, rect=False, persist=True)
    first = [loaded.track(SAMPLE_IMAGE, **kw)[0] for _ in range(3)][-1]
    again = loaded.track(SAMPLE_IMAGE, **kw)[0]
    assert first.boxes.id is not None and len(first.boxes) > 0
    assert torch.equal(first.boxes.id, again.boxes.id)  # the same scene: the same tracks
    ref = [model.track(SAMPLE_IMAGE, **kw)[0] for _ in range(3)][-1]
    assert len(ref.boxes) == len(first.boxes)  # PyTorch tracks as many boxes from the same frames
