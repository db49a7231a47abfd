"""ExecuTorch export (``torch.export`` lowered to the XNNPACK delegate) and its backend.

Where ExecuTorch is installed (the executorch extra; not in CI's environment, see
docs/export.md): the bundled trained YOLOv9-t at imgsz 128 (raw outputs, then ``decode=True``)
and an untrained ResNet-18 classifier at imgsz 64 are exported, loaded with ``LibreYOLO`` and
compared with PyTorch (raw outputs, candidates and ``predict()``). Everywhere: the refusals that
come before ExecuTorch is needed, the error naming the extra when it is missing, and the path
layout.

Tolerance: 1e-4 absolute plus 1e-4 relative on the raw outputs. The program is float32 (XNNPACK
fp32 and the portable kernels); measured largest differences with executorch 1.5.1 on this
x86-64 CPU are listed in docs/export.md (1e-5 and below); a float16 path (errors around 1e-2)
would fail it.
"""

from __future__ import annotations

import json
import shutil
import sys
from pathlib import Path

import pytest
import torch
from export_helpers import assert_same_rows, sample_batch

from libreyolo import SAMPLE_IMAGE, LibreYOLO
from libreyolo.errors import CheckpointError, ConfigError, ExportError
from libreyolo.export.registry import format_of_path, get_format

TOL = 1e-4
NO_EXECUTORCH = "the ExecuTorch tests need executorch (the executorch extra: pip install 'libreyolo[executorch]')"


@pytest.fixture(scope="module")
def et_raw(trained, tmp_path_factory: pytest.TempPathFactory) -> Path:
    pytest.importorskip("executorch.runtime", reason=NO_EXECUTORCH)
    model, _ = trained
    return model.export(format="executorch", imgsz=128, file=str(tmp_path_factory.mktemp("et") / "y9"))


@pytest.fixture
def portable(monkeypatch: pytest.MonkeyPatch):
    """PyTorch runs the portable math the export holds (SPEC K-6), outside the Triton interpreter."""
    from libreyolo import kernels

    monkeypatch.setenv("LIBREYOLO_KERNELS", "off")
    kernels.clear_cache()
    yield
    monkeypatch.undo()
    kernels.clear_cache()


def _close(ref: list[torch.Tensor], got: list[torch.Tensor]) -> None:
    assert len(got) == len(ref)
    for a, b in zip(ref, got, strict=True):
        assert a.shape == b.shape
        assert torch.allclose(a.float(), b, rtol=TOL, atol=TOL), float((a.float() - b).abs().max())


# ---------------------------------------------------------------- with ExecuTorch installed
def test_raw_outputs_and_predict_match_pytorch(trained, et_raw: Path, portable) -> None:
    model, fused = trained
    loaded = LibreYOLO(et_raw)
    assert loaded.FAMILY == "yolo9" and loaded.names == model.names and loaded.head == "raw"
    x = torch.cat((sample_batch(128), torch.rand(1, 3, 128, 128)))  # batch 3 through a batch-1 export
    first = loaded.forward(x[:1])
    ref = fused.eager_forward(x)
    _close(list(ref), loaded.forward(x))
    _close([r[:1] for r in ref], first)  # a later call did not overwrite what an earlier one returned
    kw = dict(imgsz=128, conf=0.25, rect=False)
    a = model.predict(SAMPLE_IMAGE, **kw)[0]
    b = loaded.predict(SAMPLE_IMAGE, **kw)[0]
    assert len(a) == len(b) > 0 and b.orig_shape == a.orig_shape
    assert_same_rows(b.boxes.data, a.boxes.data, box_tol=0.05)


def test_folder_layout_and_how_it_is_recognised(et_raw: Path, tmp_path: Path) -> None:
    assert et_raw.name == "y9_executorch_model" and et_raw.is_dir()
    assert sorted(p.name for p in et_raw.iterdir()) == ["libreyolo.json", "model.pte"]
    meta = json.loads((et_raw / "libreyolo.json").read_text())
    assert meta["format"] == "executorch" and meta["head"] == "raw" and meta["imgsz"] == [128, 128]
    assert meta["output_shapes"] == [[1, 70, 16, 16], [1, 70, 8, 8], [1, 70, 4, 4]]  # 6 classes + 4 x 16 DFL bins
    assert format_of_path(et_raw / "model.pte").name == "executorch"
    renamed = tmp_path / "anything"
    shutil.copytree(et_raw, renamed)
    assert format_of_path(renamed).name == "executorch"  # a folder of another name: by its files
    via_pte = LibreYOLO(renamed / "model.pte")
    assert via_pte.head == "raw" and via_pte.nc == 6 and via_pte.fixed_hw == (128, 128)
    with pytest.raises(ConfigError, match="imgsz=\\[128, 128\\]"):
        via_pte.forward(torch.rand(1, 3, 64, 64))
    with pytest.raises(ExportError, match="already an exported ExecuTorch model"):
        via_pte.export(format="onnx")


def test_decode_inside_matches_pytorch(trained, tmp_path: Path, portable) -> None:
    pytest.importorskip("executorch.runtime", reason=NO_EXECUTORCH)
    model, fused = trained
    folder = model.export(format="executorch", imgsz=128, decode=True, file=str(tmp_path / "d"))
    cache = model.family.__dict__.get("_decode_cache", {})
    assert all(type(t) is torch.Tensor for v in cache.values() for t in (v if isinstance(v, tuple) else (v,))
               if isinstance(t, torch.Tensor))  # export left no fake tensor in the caller's model
    loaded = LibreYOLO(folder)
    assert loaded.head == "decode"
    x = sample_batch(128)
    (got,) = loaded.forward(x)
    want = fused.family.decode(fused.eager_forward(x))
    assert got.shape == want.shape == (2, 336, 6)  # every anchor of 16x16 + 8x8 + 4x4 (fewer than DECODE_TOPK)
    for b in range(2):
        assert_same_rows(got[b], want[b], box_tol=1e-3)
    kw = dict(imgsz=128, conf=0.25, rect=False)
    a = model.predict(SAMPLE_IMAGE, **kw)[0]
    c = loaded.predict(SAMPLE_IMAGE, **kw)[0]
    assert len(a) == len(c) > 0
    assert_same_rows(c.boxes.data, a.boxes.data, box_tol=0.05)


def test_classifier_logits_and_top1_match_pytorch(tmp_path: Path, portable) -> None:
    pytest.importorskip("executorch.runtime", reason=NO_EXECUTORCH)
    torch.manual_seed(0)
    model = LibreYOLO("LibreResNet18-cls.pt", pretrained=False, nc=4)
    loaded = LibreYOLO(model.export(format="executorch", imgsz=64, file=str(tmp_path / "r18")))
    assert loaded.task == model.task == "classify" and loaded.names == model.names
    x = torch.cat((sample_batch(64), torch.rand(2, 3, 64, 64)))  # batch 4 through a batch-1 export
    model.fuse()
    _close([model.eager_forward(x)], loaded.forward(x))
    a = model.predict(SAMPLE_IMAGE, imgsz=64)[0]
    b = loaded.predict(SAMPLE_IMAGE, imgsz=64)[0]
    assert int(a.probs.top1) == int(b.probs.top1)
    assert torch.allclose(a.probs.data, b.probs.data, atol=TOL, rtol=TOL)


# ---------------------------------------------------------------- everywhere
def test_paths_and_suffixes(tmp_path: Path) -> None:
    fmt = get_format("executorch")
    assert fmt.output_path("dir/m", "X") == Path("dir/m_executorch_model")
    assert fmt.output_path(None, "LibreYOLO9t") == Path("LibreYOLO9t_executorch_model")
    assert format_of_path("m_executorch_model").name == "executorch"
    assert format_of_path("m_executorch_model/model.pte").name == "executorch"
    assert format_of_path(tmp_path) is None
    (tmp_path / "libreyolo.json").write_text("{}")
    (tmp_path / "model.pte").write_bytes(b"")
    assert format_of_path(tmp_path).name == "executorch"


def test_refusals_before_executorch_is_needed(trained, tmp_path: Path) -> None:
    model, _ = trained
    with pytest.raises(ExportError, match="cannot hold NMS.*decode=True"):
        model.export(format="executorch", imgsz=64, nms=True, file=str(tmp_path / "n"))
    with pytest.raises(ExportError, match="dynamic=False"):
        model.export(format="executorch", imgsz=64, dynamic=True, file=str(tmp_path / "x"))
    with pytest.raises(ExportError, match="float32.*half=False"):
        model.export(format="executorch", imgsz=64, half=True, file=str(tmp_path / "x"))
    assert not list(tmp_path.iterdir())  # a refused export leaves nothing behind
    with pytest.raises(ConfigError, match="CPU"):
        LibreYOLO(tmp_path / "m_executorch_model", device="cuda")
    with pytest.raises(CheckpointError, match="does not exist"):
        LibreYOLO(tmp_path / "missing_executorch_model")
    bare = tmp_path / "bare_executorch_model"
    bare.mkdir()
    (bare / "model.pte").write_bytes(b"not a program")
    with pytest.raises(CheckpointError, match="not a libreyolo ExecuTorch export"):
        LibreYOLO(bare)


def test_missing_executorch_names_the_extra(trained, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    for name in ("executorch", "executorch.exir", "executorch.runtime",
                 "executorch.backends.xnnpack.partition.xnnpack_partitioner"):
        monkeypatch.setitem(sys.modules, name, None)  # `import name` raises ImportError
    model, _ = trained
    with pytest.raises(ExportError, match=r"executorch extra.*libreyolo\[executorch\]"):
        model.export(format="executorch", imgsz=64, file=str(tmp_path / "m"))
    assert not list(tmp_path.iterdir())
    folder = tmp_path / "m_executorch_model"
    folder.mkdir()
    (folder / "model.pte").write_bytes(b"")
    (folder / "libreyolo.json").write_text("{}")
    with pytest.raises(CheckpointError, match=r"libreyolo\[executorch\]"):
        LibreYOLO(folder)


def test_failure_reasons_name_the_cause() -> None:
    from libreyolo.export.executorch import _reason, program_operators

    err = RuntimeError("Could not guard on data-dependent expression Eq(u0, 0)\n\n"
                       "Caused by: (torchvision/ops/boxes.py:103 in _batched_nms_coordinate_trick)\nmore")
    assert _reason(err) == ("RuntimeError: Could not guard on data-dependent expression Eq(u0, 0) "
                            "(caused by torchvision/ops/boxes.py:103 in _batched_nms_coordinate_trick)")

    class Op:
        def __init__(self, name: str, overload: str) -> None:
            self.name, self.overload = name, overload

    class Plan:
        operators = [Op("aten::topk", "values"), Op("aten::add", "out"), Op("aten::topk", "values"), Op("x::y", "")]

    class Program:
        execution_plan = [Plan()]

    assert program_operators(Program()) == ["aten::add.out", "aten::topk.values", "x::y"]
