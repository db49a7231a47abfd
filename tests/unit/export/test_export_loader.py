"""``LibreYOLO(path)`` opens every registered export format through the format registry."""

from __future__ import annotations

import importlib.util
from pathlib import Path

import pytest
import torch

from libreyolo import SAMPLE_IMAGE, LibreYOLO
from libreyolo.errors import CheckpointError

NEEDS = {"onnx": ("onnx", "onnxruntime"), "torchscript": (), "openvino": ("onnx", "openvino")}


@pytest.mark.parametrize("fmt", list(NEEDS))
def test_libreyolo_opens_each_format(fmt: str, trained, tmp_path: Path) -> None:
    for mod in NEEDS[fmt]:
        pytest.importorskip(mod)
    model, _ = trained
    path = model.export(format=fmt, imgsz=96, decode=True, file=str(tmp_path / "m"))
    loaded = LibreYOLO(str(path))
    assert loaded.meta["format"] == fmt and loaded.head == "decode" and loaded.names == model.names
    a = model.predict(SAMPLE_IMAGE, imgsz=96, rect=False)[0]
    b = loaded(SAMPLE_IMAGE, imgsz=96)[0]  # fixed-shape export: rect=False by default
    assert len(a) == len(b) > 0 and torch.allclose(a.boxes.xyxy, b.boxes.xyxy, atol=0.05)
    if fmt == "openvino":  # the folder and its .xml both open
        assert LibreYOLO(str(next(Path(path).glob("*.xml")))).nc == model.nc


def test_a_missing_export_is_a_clear_error(tmp_path: Path) -> None:
    with pytest.raises(CheckpointError, match="does not exist"):
        LibreYOLO(str(tmp_path / "missing.torchscript"))
    if importlib.util.find_spec("openvino") is not None:
        with pytest.raises(CheckpointError, match="does not exist"):
            LibreYOLO(str(tmp_path / "missing_openvino_model"))


def test_cli_predicts_and_validates_a_torchscript_export(trained, tmp_path: Path, capsys) -> None:
    from libreyolo.cli.main import entrypoint
    from libreyolo.data.shapes import ensure_shapes_dataset

    model, _ = trained
    path = model.export(format="torchscript", imgsz=128, nms=True, file=str(tmp_path / "m"))
    data = ensure_shapes_dataset(tmp_path / "ds", n_train=2, n_val=4, imgsz=160)
    assert entrypoint(["predict", f"model={path}", "imgsz=128", "save=false"]) == 0
    assert entrypoint(["val", f"model={path}", f"data={data}", "workers=0"]) == 0
    out = capsys.readouterr().out
    assert "1 image" in out and "mAP50-95" in out
