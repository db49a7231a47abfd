"""``val`` on exported models: the validator runs the runtime through ``ExportedBackend.net`` and scores
it as it scores PyTorch (same metrics within float noise), for every format and graph head."""

from __future__ import annotations

from pathlib import Path

import pytest

from libreyolo import LibreYOLO
from libreyolo.errors import ConfigError

CASES = [("onnx", "raw", ("onnx", "onnxruntime")), ("torchscript", "nms", ()),
         ("openvino", "decode", ("onnx", "openvino"))]


@pytest.fixture(scope="module")
def dataset(tmp_path_factory: pytest.TempPathFactory) -> str:
    from libreyolo.data.shapes import ensure_shapes_dataset

    return str(ensure_shapes_dataset(tmp_path_factory.mktemp("ds"), n_train=2, n_val=12, imgsz=160))


@pytest.fixture(scope="module")
def reference(trained, dataset):
    model, _ = trained
    return model.val(data=dataset, imgsz=128, workers=0, verbose=False)


@pytest.mark.parametrize("fmt,head,needs", CASES, ids=[f"{f}-{h}" for f, h, _ in CASES])
def test_val_of_an_export_matches_pytorch(fmt: str, head: str, needs: tuple[str, ...], trained, dataset, reference,
                                          tmp_path: Path) -> None:
    for mod in needs:
        pytest.importorskip(mod)
    model, _ = trained
    path = model.export(format=fmt, imgsz=128, file=str(tmp_path / "m"), decode=head == "decode", nms=head == "nms")
    got = LibreYOLO(path).val(data=dataset, workers=0, verbose=False, batch=4)  # imgsz: the export's
    assert reference["mAP50-95"] > 0.1  # the bundled checkpoint detects the shapes
    for key in ("mAP50-95", "mAP50"):
        assert got[key] == pytest.approx(reference[key], abs=1e-4), key
    for key in ("precision", "recall"):
        assert got[key] == pytest.approx(reference[key], abs=1e-3), key
    assert got["images"] == reference["images"] == 12


def test_val_of_a_fixed_size_export_refuses_another_imgsz(trained, dataset, tmp_path: Path) -> None:
    model, _ = trained
    loaded = LibreYOLO(model.export(format="torchscript", imgsz=64, file=str(tmp_path / "m")))
    with pytest.raises(ConfigError, match="imgsz=64"):
        loaded.val(data=dataset, imgsz=128, workers=0, verbose=False)
    with pytest.raises(ConfigError, match="half"):
        loaded.val(data=dataset, half=True, workers=0, verbose=False)


def test_cli_val_of_an_onnx_file(trained, dataset, tmp_path: Path, capsys) -> None:
    pytest.importorskip("onnxruntime")
    from libreyolo.cli.main import entrypoint

    model, _ = trained
    path = model.export(format="onnx", imgsz=128, nms=True, file=str(tmp_path / "m.onnx"))
    rc = entrypoint(["val", f"model={path}", f"data={dataset}", "workers=0", "batch=2"])
    assert rc == 0
    assert "mAP50-95" in capsys.readouterr().out


def test_val_of_an_exported_classifier_matches_pytorch(tmp_path: Path) -> None:
    import torch

    from libreyolo import LibreYOLO
    from libreyolo.data.shapes_cls import ensure_shapes_cls_dataset

    data = ensure_shapes_cls_dataset(tmp_path / "ds", n_train=1, n_val=3)
    torch.manual_seed(0)
    model = LibreYOLO("LibreResNet18-cls.pt", pretrained=False, nc=6)
    ref = model.val(data=str(data), imgsz=64, workers=0, verbose=False)
    loaded = LibreYOLO(model.export(format="torchscript", imgsz=64, dynamic=True, file=str(tmp_path / "c")))
    got = loaded.val(data=str(data), imgsz=64, workers=0, verbose=False)
    assert got["images"] == ref["images"] > 0
    assert got["top1"] == pytest.approx(ref["top1"]) and got["top5"] == pytest.approx(ref["top5"])
