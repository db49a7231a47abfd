"""``libreyolo export / benchmark / val`` with the new formats and exported models."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from libreyolo import LibreYOLO
from libreyolo.bench.exported import benchmark_exported
from libreyolo.cli.main import entrypoint


def test_cli_exports_torchscript_with_nms_inside(tmp_path: Path, monkeypatch) -> None:
    monkeypatch.chdir(tmp_path)
    rc = entrypoint(["export", "model=LibreYOLO9t.pt", "format=torchscript", "imgsz=64", "nms=true",
                     "max_det=20", "file=m"])
    assert rc == 0
    loaded = LibreYOLO(tmp_path / "m.torchscript")
    assert loaded.head == "nms" and loaded.meta["max_det"] == 20
    assert loaded.forward(__import__("torch").rand(1, 3, 64, 64))[0].shape == (1, 20, 6)
    assert entrypoint(["export", "model=LibreYOLO9t.pt", "format=torchscrip"]) != 0  # a typo: clear error


def test_cli_benchmark_of_an_export_times_its_runtime(tmp_path: Path, capsys, trained) -> None:
    model, _ = trained
    path = model.export(format="torchscript", imgsz=64, decode=True, dynamic=True, file=str(tmp_path / "m"))
    rc = entrypoint(["benchmark", f"model={path}", "batch=1,2", "warmup=1", "iters=2", f"out={tmp_path / 'b'}"])
    assert rc == 0
    out = capsys.readouterr().out
    assert "batch   2" in out and "predict() end to end" in out
    saved = json.loads((tmp_path / "b" / "benchmark-torchscript.json").read_text())
    assert [r["batch"] for r in saved["runs"]] == [1, 2] and saved["head"] == "decode"
    assert all(r["network_ms"] > 0 for r in saved["runs"]) and saved["predict_ms"] > 0
    from libreyolo.errors import ConfigError

    with pytest.raises(ConfigError, match="cuda_graph applies to PyTorch"):
        benchmark_exported(model=path, cuda_graph=True, show=False)


def test_cli_export_of_an_exported_model_is_a_clear_error(tmp_path: Path, capsys, trained) -> None:
    pytest.importorskip("onnxruntime")
    model, _ = trained
    path = model.export(format="onnx", imgsz=64, file=str(tmp_path / "m.onnx"))
    rc = entrypoint(["export", f"model={path}", "format=onnx"])
    assert rc != 0
    err = capsys.readouterr().err
    assert "already an exported ONNX model" in err and "unexpected error" not in err


def test_train_on_an_export_is_a_clear_error(tmp_path: Path, trained) -> None:
    from libreyolo.errors import ConfigError

    model, _ = trained
    loaded = LibreYOLO(model.export(format="torchscript", imgsz=64, file=str(tmp_path / "m")))
    with pytest.raises(ConfigError, match="cannot train"):
        loaded.train(data="shapes", epochs=1)
