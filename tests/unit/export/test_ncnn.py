"""NCNN export (pnnx converts the TorchScript trace) and its backend: raw-output parity with
PyTorch (untrained YOLOv9-t and ResNet-18 at imgsz 64), ``predict`` and ``val`` through the
bundled trained checkpoint, the folder layout and the refusals.

Tolerance: 1e-4 absolute plus 1e-4 relative on the raw outputs. The backend turns NCNN's
fp16/bf16 storage and arithmetic off, so NCNN computes in float32 and differs from PyTorch only
by its kernels' summation order. Measured largest differences (pnnx/ncnn 20261020, x86-64): 3e-7
for the untrained yolo9-t and 2e-6 for the ResNet-18 logits here, 4.6e-5 for the trained yolo9-t
at 128 px on outputs up to 17; a float16 path (errors around 1e-2) would fail the tolerance.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import torch
from export_helpers import assert_same_rows, sample_batch

from libreyolo import SAMPLE_IMAGE, LibreYOLO
from libreyolo.errors import CheckpointError, ConfigError, ExportError
from libreyolo.export.registry import format_of_path
from libreyolo.model import Model
from libreyolo.registry import get_family

pytest.importorskip("ncnn", reason="the NCNN tests need ncnn (the ncnn extra: pip install 'libreyolo[ncnn]')")
pytest.importorskip("pnnx", reason="the NCNN tests need pnnx (the ncnn extra: pip install 'libreyolo[ncnn]')")

TOL = 1e-4


@pytest.fixture
def portable(monkeypatch: pytest.MonkeyPatch):
    """PyTorch runs the portable math the export holds (SPEC K-6), outside the Triton interpreter."""
    from libreyolo import kernels

    monkeypatch.setenv("LIBREYOLO_KERNELS", "off")
    kernels.clear_cache()
    yield
    monkeypatch.undo()
    kernels.clear_cache()


@pytest.fixture(scope="module")
def trained_ncnn(trained, tmp_path_factory: pytest.TempPathFactory) -> Path:
    model, _ = trained
    return model.export(format="ncnn", imgsz=128, file=str(tmp_path_factory.mktemp("ncnn") / "y9"))


def _untrained(name: str) -> Model:
    torch.manual_seed(0)
    if name == "resnet":
        return LibreYOLO("LibreResNet18-cls.pt", pretrained=False, nc=4)
    return Model(get_family("yolo9")(size="t", nc=80))


@pytest.mark.parametrize("name", ["yolo9", "resnet"])
def test_raw_outputs_match_pytorch(name: str, tmp_path: Path, portable, monkeypatch: pytest.MonkeyPatch) -> None:
    model = _untrained(name)
    monkeypatch.chdir(tmp_path)  # a relative output path (pnnx runs in a folder of its own)
    folder = model.export(format="ncnn", imgsz=64, file=name)
    assert folder == Path(f"{name}_ncnn_model") and folder.is_dir()
    loaded = LibreYOLO(folder)
    assert loaded.FAMILY == model.FAMILY and loaded.names == model.names and loaded.head == "raw"
    x = torch.cat((sample_batch(64), torch.rand(1, 3, 64, 64)))  # batch 3 through a batch-1 export
    model.fuse()
    ref = model.eager_forward(x)
    ref = list(ref) if isinstance(ref, (list, tuple)) else [ref]
    got = loaded.forward(x)
    assert len(got) == len(ref)
    for a, b in zip(ref, got, strict=True):
        assert a.shape == b.shape
        assert torch.allclose(a.float(), b, rtol=TOL, atol=TOL), float((a.float() - b).abs().max())


def test_folder_layout_and_how_it_is_recognised(trained_ncnn: Path, tmp_path: Path) -> None:
    folder = trained_ncnn
    assert folder.name == "y9_ncnn_model" and folder.is_dir()
    assert sorted(p.name for p in folder.iterdir()) == ["libreyolo.json", "model.ncnn.bin", "model.ncnn.param"]
    meta = json.loads((folder / "libreyolo.json").read_text())
    assert meta["format"] == "ncnn" and meta["head"] == "raw" and meta["imgsz"] == [128, 128]
    assert format_of_path(folder).name == "ncnn"
    assert format_of_path(folder / "model.ncnn.param").name == "ncnn"
    renamed = tmp_path / "anything"
    import shutil

    shutil.copytree(folder, renamed)
    assert format_of_path(renamed).name == "ncnn"  # a folder of another name: by its files
    via_param = LibreYOLO(renamed / "model.ncnn.param")
    assert via_param.head == "raw" and via_param.nc == 6 and via_param.fixed_hw == (128, 128)


def test_predict_through_ncnn_matches_pytorch(trained, trained_ncnn: Path) -> None:
    model, _ = trained
    loaded = LibreYOLO(trained_ncnn)
    kw = dict(imgsz=128, conf=0.25, rect=False)
    a = model.predict(SAMPLE_IMAGE, **kw)[0]
    b = loaded.predict(SAMPLE_IMAGE, **kw)[0]
    assert len(a) == len(b) > 0  # raw outputs within 1e-4: no box crosses conf=0.25 here
    assert b.orig_shape == a.orig_shape
    assert_same_rows(b.boxes.data, a.boxes.data, box_tol=0.05)


def test_val_through_ncnn_matches_pytorch(trained, trained_ncnn: Path, tmp_path: Path) -> None:
    from libreyolo.data.shapes import ensure_shapes_dataset

    model, _ = trained
    data = str(ensure_shapes_dataset(tmp_path / "ds", n_train=2, n_val=12, imgsz=160))
    ref = model.val(data=data, imgsz=128, workers=0, verbose=False)
    got = LibreYOLO(trained_ncnn).val(data=data, workers=0, verbose=False, batch=4)  # imgsz: the export's
    assert ref["mAP50-95"] > 0.1 and got["images"] == ref["images"] == 12
    for key in ("mAP50-95", "mAP50"):
        assert got[key] == pytest.approx(ref[key], abs=1e-4), key


def test_refusals_name_the_fix(trained, trained_ncnn: Path, tmp_path: Path) -> None:
    model, _ = trained
    with pytest.raises(ExportError, match=r"no layer for .*torch\.topk.*decode=False"):
        model.export(format="ncnn", imgsz=64, decode=True, file=str(tmp_path / "d"))
    assert not list(tmp_path.iterdir())  # a refused export leaves nothing behind
    yolox = Model(get_family("yolox")(size="nano", nc=3))  # its stem slices with a stride: no NCNN layer
    with pytest.raises(ExportError, match=r"Tensor\.slice in the network of yolox-nano.*cannot run this family"):
        yolox.export(format="ncnn", imgsz=64, file=str(tmp_path / "yx"))
    assert not list(tmp_path.iterdir())
    with pytest.raises(ExportError, match="dynamic=False"):
        model.export(format="ncnn", imgsz=64, dynamic=True, file=str(tmp_path / "x"))
    with pytest.raises(ExportError, match="batch=1"):
        model.export(format="ncnn", imgsz=64, batch=2, file=str(tmp_path / "x"))
    with pytest.raises(CheckpointError, match="does not exist"):
        LibreYOLO(tmp_path / "missing_ncnn_model")
    bare = tmp_path / "bare_ncnn_model"
    bare.mkdir()
    for f in ("model.ncnn.param", "model.ncnn.bin"):
        (bare / f).write_bytes((trained_ncnn / f).read_bytes())
    with pytest.raises(CheckpointError, match="not a libreyolo NCNN export"):
        LibreYOLO(bare)
    with pytest.raises(ConfigError, match="CPU"):
        LibreYOLO(trained_ncnn, device="cuda")
    with pytest.raises(ExportError, match="already an exported NCNN model"):
        LibreYOLO(trained_ncnn).export(format="onnx")


def test_unconverted_layers_are_found() -> None:
    from libreyolo.export.ncnn import unconverted_layers

    text = "7767517\n3 3\nInput in0 0 1 in0\ntorch.topk t 1 2 a b c\naten::nonzero n 1 1 a b\nSwish s 1 1 b c\n"
    assert unconverted_layers(text) == ["aten::nonzero", "torch.topk"]
