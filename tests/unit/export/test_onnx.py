"""ONNX export: portable ops only, metadata round-trip, ONNX Runtime parity, errors."""

from __future__ import annotations

import json

import numpy as np
import pytest
import torch

onnx = pytest.importorskip("onnx", reason="the onnx extra is part of the CI environment")
ort = pytest.importorskip("onnxruntime")

from libreyolo import SAMPLE_IMAGE, LibreYOLO  # noqa: E402
from libreyolo.errors import CheckpointError, ConfigError, ExportError  # noqa: E402
from libreyolo.export.onnx import portable_op_violations  # noqa: E402


@pytest.fixture(scope="module")
def exported(tmp_path_factory: pytest.TempPathFactory):
    torch.manual_seed(0)
    model = LibreYOLO("LibreYOLO9t.pt", pretrained=False, nc=3, names=["a", "b", "c"])
    path = model.export(format="onnx", imgsz=96, dynamic=True, file=str(tmp_path_factory.mktemp("x") / "m.onnx"))
    return model, path


def test_graph_holds_only_portable_standard_ops(exported) -> None:
    _, path = exported
    proto = onnx.load(str(path))
    assert portable_op_violations(proto) == []
    ops = {n.op_type for n in proto.graph.node}
    assert "Conv" in ops
    assert all(n.domain in ("", "ai.onnx") for n in proto.graph.node)


def test_violation_checker_flags_custom_and_attention_ops() -> None:
    from onnx import helper

    nodes = [helper.make_node("Attention", ["q", "k", "v"], ["o"]),
             helper.make_node("MSDeformAttn", ["a"], ["b"], domain="com.example")]
    graph = helper.make_graph(nodes, "g", [], [])
    assert len(portable_op_violations(helper.make_model(graph))) == 2


def test_metadata_round_trip(exported) -> None:
    model, path = exported
    meta = json.loads({p.key: p.value for p in onnx.load(str(path)).metadata_props}["libreyolo"])
    assert meta["family"] == "yolo9" and meta["size"] == "t" and meta["nc"] == 3
    assert meta["names"] == {"0": "a", "1": "b", "2": "c"}
    assert meta["outputs"] == list(model.OUTPUT_NAMES)
    loaded = LibreYOLO(str(path))
    assert loaded.names == model.names and loaded.FAMILY == "yolo9"


def test_onnxruntime_outputs_match_pytorch(exported) -> None:
    model, path = exported
    loaded = LibreYOLO(str(path))
    x = torch.rand(2, 3, 96, 128)  # dynamic batch and width
    ref_net = model.net.eval()
    with torch.no_grad():
        ref = ref_net(x)
    got = loaded.forward(x)
    assert len(got) == len(ref)
    for a, b in zip(ref, got, strict=True):
        assert a.shape == b.shape
        assert torch.allclose(a, b, rtol=1e-3, atol=1e-3), float((a - b).abs().max())


def test_predict_through_onnxruntime_matches_pytorch_detections(exported) -> None:
    model, path = exported
    loaded = LibreYOLO(str(path))
    # The export holds the unfused network, and ONNX Runtime models decode with the family's eager
    # postprocess: compare like with like (``classes`` routes PyTorch through that postprocess too;
    # an untrained head scores every anchor near its prior, so near-ties at conf=0.001 would
    # otherwise be ordered by the captured decode's top-k instead of the eager filter).
    kw = dict(imgsz=96, conf=0.001, max_det=50, fuse=False, classes=[0, 1, 2])
    a = model.predict(SAMPLE_IMAGE, **kw)[0]
    b = loaded.predict(SAMPLE_IMAGE, **kw)[0]
    assert len(a) == len(b) > 0
    assert torch.allclose(a.boxes.xyxy, b.boxes.xyxy, atol=0.05)
    assert torch.equal(a.boxes.cls, b.boxes.cls)


def test_export_errors(tmp_path) -> None:
    model = LibreYOLO("LibreYOLO9t.pt", pretrained=False, nc=2)
    with pytest.raises(ExportError, match="unknown export format 'onx'.*onnx"):
        model.export(format="onx")
    with pytest.raises(ConfigError, match="unknown export argument 'dynamc'.*dynamic"):
        model.export(format="onnx", dynamc=True)
    with pytest.raises(ExportError, match="half=True"):
        model.export(format="onnx", half=True, file=str(tmp_path / "h.onnx"))
    other = tmp_path / "plain.onnx"
    torch.onnx.export(torch.nn.Conv2d(3, 3, 1), (torch.rand(1, 3, 8, 8),), str(other), dynamo=False)
    with pytest.raises(CheckpointError, match="not a libreyolo ONNX export"):
        LibreYOLO(str(other))


def test_fixed_shape_export_rejects_other_sizes(tmp_path) -> None:
    model = LibreYOLO("LibreYOLO9t.pt", pretrained=False, nc=2)
    path = model.export(format="onnx", imgsz=64, file=str(tmp_path / "f.onnx"))
    loaded = LibreYOLO(str(path))
    with pytest.raises(ConfigError, match="imgsz"):
        loaded.predict(np.full((50, 50, 3), 100, np.uint8), imgsz=96)
    assert len(loaded.predict(np.full((50, 50, 3), 100, np.uint8), imgsz=64)) == 1


def test_cli_export_writes_a_loadable_file(tmp_path, monkeypatch) -> None:
    from libreyolo.cli.main import entrypoint

    monkeypatch.chdir(tmp_path)
    out = tmp_path / "cli.onnx"
    rc = entrypoint(["export", "model=LibreYOLO9t.pt", "format=onnx", "imgsz=64", f"file={out}"])
    assert rc == 0 and out.is_file()
    assert LibreYOLO(str(out)).FAMILY == "yolo9"
    assert entrypoint(["export", "model=LibreYOLO9t.pt", "format=tflite"]) != 0


def test_exported_classifier_predicts_through_onnxruntime(tmp_path) -> None:
    torch.manual_seed(0)
    model = LibreYOLO("LibreResNet18-cls.pt", pretrained=False, nc=4)
    path = model.export(format="onnx", imgsz=64, file=str(tmp_path / "c.onnx"))
    loaded = LibreYOLO(str(path))
    a = model.predict(SAMPLE_IMAGE, imgsz=64)[0]
    b = loaded.predict(SAMPLE_IMAGE, imgsz=64)[0]
    assert b.probs is not None and b.boxes is None
    assert a.probs.top1 == b.probs.top1
    assert torch.allclose(a.probs.data, b.probs.data, atol=1e-4)


def test_fixed_shape_export_predicts_a_non_square_image(tmp_path) -> None:
    import numpy as np

    torch.manual_seed(0)
    model = LibreYOLO("LibreYOLO9t.pt", pretrained=False, nc=2)
    path = model.export(format="onnx", imgsz=96, file=str(tmp_path / "f.onnx"))  # dynamic=False
    loaded = LibreYOLO(str(path))
    img = np.zeros((108, 192, 3), np.uint8)  # would letterbox to 64x96 with rect=True
    (r,) = loaded.predict(img, imgsz=96)
    assert r.orig_shape == (108, 192)
