"""The export format registry and the fixed-size NMS every exported ``nms=True`` graph runs."""

from __future__ import annotations

from pathlib import Path

import pytest
import torch

from libreyolo.errors import ConfigError, ExportError
from libreyolo.export.config import ExportConfig
from libreyolo.export.graph import fixed_nms, nms_indices
from libreyolo.export.registry import (
    ExportFormat,
    format_names,
    format_of_path,
    get_format,
    register_format,
)
from libreyolo.ops.candidates import select_detections


def test_registry_lists_formats_and_finds_them_by_path(tmp_path: Path) -> None:
    assert {"onnx", "torchscript", "openvino", "ncnn"} <= set(format_names())
    assert get_format("ONNX").name == "onnx"
    assert format_of_path("a/b.onnx").name == "onnx"
    assert format_of_path("m.torchscript").name == "torchscript"
    assert format_of_path("m_openvino_model").name == "openvino"
    assert format_of_path("m_openvino_model/m.xml").name == "openvino"
    assert format_of_path("m_ncnn_model").name == "ncnn"
    assert format_of_path("m_ncnn_model/model.ncnn.param").name == "ncnn"
    assert format_of_path("LibreYOLO9t.pt") is None
    assert format_of_path(tmp_path) is None  # an empty folder is no OpenVINO model
    (tmp_path / "annotations.xml").write_text("<a/>")
    assert format_of_path(tmp_path) is None  # nor is a folder of XML labels
    (tmp_path / "libreyolo.json").write_text("{}")
    assert format_of_path(tmp_path).name == "openvino"  # a renamed export folder is
    ncnn_dir = tmp_path / "renamed"
    ncnn_dir.mkdir()
    (ncnn_dir / "libreyolo.json").write_text("{}")
    assert format_of_path(ncnn_dir) is None  # metadata alone names no format
    (ncnn_dir / "model.ncnn.param").write_text("7767517\n")
    assert format_of_path(ncnn_dir).name == "ncnn"  # a renamed NCNN folder, by its .param
    with pytest.raises(ExportError, match=r"unknown export format 'torchscrpt'.*'torchscript'.*onnx, "):
        get_format("torchscrpt")


def test_output_paths_take_the_format_suffix() -> None:
    assert get_format("onnx").output_path("out/m.bin", "X") == Path("out/m.onnx")
    assert get_format("onnx").output_path(None, "LibreYOLO9t") == Path("LibreYOLO9t.onnx")
    assert get_format("torchscript").output_path("m", "X") == Path("m.torchscript")
    assert get_format("openvino").output_path("dir/m", "X") == Path("dir/m_openvino_model")
    assert get_format("openvino").output_path(None, "LibreYOLO9t") == Path("LibreYOLO9t_openvino_model")
    assert get_format("ncnn").output_path("dir/m", "X") == Path("dir/m_ncnn_model")
    assert get_format("ncnn").output_path(None, "LibreYOLO9t") == Path("LibreYOLO9t_ncnn_model")


def test_registering_a_different_format_under_a_taken_name_raises() -> None:
    onnx = get_format("onnx")
    assert register_format(onnx) is onnx  # the same entry again is harmless
    other = ExportFormat(name="onnx", suffix=".x", exporter="m:f", backend="m:c", extra="", runs="")
    with pytest.raises(ExportError, match="registered twice"):
        register_format(other)


def test_export_config_checks_the_new_keys() -> None:
    cfg = ExportConfig.from_overrides({"nms": True, "iou": 0.5, "max_det": 10}, default_imgsz=64)
    assert cfg.head == "nms" and cfg.iou == 0.5 and cfg.max_det == 10
    assert ExportConfig.from_overrides({"decode": True}, default_imgsz=64).head == "decode"
    assert ExportConfig.from_overrides({}, default_imgsz=64).head == "raw"
    with pytest.raises(ExportError, match="iou"):
        ExportConfig.from_overrides({"iou": 1.5}, default_imgsz=64)
    with pytest.raises(ExportError, match="max_det"):
        ExportConfig.from_overrides({"max_det": 0}, default_imgsz=64)
    with pytest.raises(ConfigError, match="'nsm'.*nms"):
        ExportConfig.from_overrides({"nsm": True}, default_imgsz=64)


def _candidates(seed: int, *, b: int = 2, k: int = 200, nc: int = 3) -> torch.Tensor:
    """Clustered boxes (many overlaps, so NMS has chains of suppression) sorted by score."""
    g = torch.Generator().manual_seed(seed)
    centres = torch.rand(b, 6, 2, generator=g) * 200
    pick = torch.randint(0, 6, (b, k), generator=g)
    c = centres.gather(1, pick[..., None].expand(-1, -1, 2)) + torch.randn(b, k, 2, generator=g) * 6
    wh = 20 + torch.rand(b, k, 2, generator=g) * 30
    boxes = torch.cat((c - wh / 2, c + wh / 2), -1)
    score = torch.rand(b, k, generator=g)
    cls = torch.randint(0, nc, (b, k), generator=g).float()
    score, order = score.sort(1, descending=True)
    boxes = boxes.gather(1, order[..., None].expand(-1, -1, 4))
    return torch.cat((boxes, score[..., None], cls.gather(1, order)[..., None]), -1)


@pytest.mark.parametrize("agnostic", [False, True])
@pytest.mark.parametrize("seed", [0, 1])
def test_fixed_nms_equals_the_eager_selection(seed: int, agnostic: bool) -> None:
    cands = _candidates(seed)
    got = fixed_nms(cands, nc=3, iou=0.5, conf=0.2, max_det=50, agnostic=agnostic)
    want = select_detections(cands, conf=0.2, iou=0.5, max_det=50, agnostic=agnostic)
    assert got.shape == (2, 50, 6)
    for b in range(2):
        n = len(want[b])
        assert 0 < n  # the case is not trivial
        assert torch.equal(got[b, :n], want[b])
        assert not got[b, n:].any()  # padding rows are zero


def test_nms_indices_is_per_batch_and_class() -> None:
    boxes = torch.tensor([[[0, 0, 10, 10], [1, 1, 10, 10], [50, 50, 60, 60]]], dtype=torch.float32).repeat(2, 1, 1)
    scores = torch.tensor([[[0.9, 0.8, 0.0], [0.0, 0.0, 0.7]], [[0.9, 0.0, 0.0], [0.0, 0.8, 0.7]]])
    sel = {tuple(r) for r in nms_indices(boxes, scores, iou=0.5, score_threshold=0.01).tolist()}
    # image 0: box 1 overlaps box 0 in class 0 (suppressed); image 1: box 0 and 1 are in different classes
    assert sel == {(0, 0, 0), (0, 1, 2), (1, 0, 0), (1, 1, 1), (1, 1, 2)}
