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
from libreyolo.registry import families

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


def test_a_program_that_differs_from_pytorch_is_refused(trained, et_raw: Path) -> None:
    from libreyolo.export.executorch import verify

    model, _ = trained
    data = (et_raw / "model.pte").read_bytes()
    x = torch.rand(1, 3, 128, 128)
    ref = list(LibreYOLO(et_raw).forward(x))
    verify(data, x, ref, model=model.family)  # its own outputs pass
    ref[1] = ref[1] + 0.01
    with pytest.raises(ExportError, match=r"does not reproduce PyTorch.*largest differences \[0\.0, 0\.01"):
        verify(data, x, ref, model=model.family)


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

    err = RuntimeError("def forward(self, arg0_1):\n    sum_1 = torch.ops.aten.sum.default(arg0_1)\n\n"
                       "Could not guard on data-dependent expression Eq(u0, 0)\n"
                       "Caused by: (torchvision/ops/boxes.py:103 in _batched_nms_coordinate_trick)\nmore")
    assert _reason(err) == ("RuntimeError: Could not guard on data-dependent expression Eq(u0, 0) "
                            "(caused by torchvision/ops/boxes.py:103 in _batched_nms_coordinate_trick)")
    err = RuntimeError("Could not guard\nThe following call raised this error:\n"
                       '  File "/x/libreyolo/models/a.py", line 7, in forward\nmore')
    assert _reason(err) == "RuntimeError: Could not guard (at models/a.py:7 in forward)"
    assert _reason(ValueError()) == "ValueError: ValueError"

    class Op:
        def __init__(self, name: str, overload: str) -> None:
            self.name, self.overload = name, overload

    class Plan:
        operators = [Op("aten::topk", "values"), Op("aten::add", "out"), Op("aten::topk", "values"), Op("x::y", "")]

    class Program:
        execution_plan = [Plan()]

    assert program_operators(Program()) == ["aten::add.out", "aten::topk.values", "x::y"]


def test_torch_export_failure_names_the_cause() -> None:
    from types import SimpleNamespace

    from libreyolo.export.executorch import export_program

    class DataDependent(torch.nn.Module):
        def forward(self, x: torch.Tensor) -> torch.Tensor:
            return x.nonzero().float().sum(0)[:1] if bool(x.sum() > 0) else x  # branches on a value

    fam = SimpleNamespace(FAMILY="toy", size="t")
    with pytest.raises(ExportError, match=r"torch\.export cannot export toy-t.*data-dependent.*at export/test_executorch\.py:\d+ in forward"):
        export_program(DataDependent(), torch.rand(1, 3, 8, 8), model=fam)


def test_candidate_sets_tolerate_tied_order_only() -> None:
    from libreyolo.export.executorch import same_candidates

    torch.manual_seed(0)
    boxes = torch.rand(6, 4) * 100
    score = torch.tensor([0.9, 0.7, 0.7, 0.5, 0.3, 0.1])
    ref = torch.cat((boxes, score[:, None], torch.tensor([0.0, 1, 2, 0, 1, 2])[:, None]), 1)
    assert same_candidates(ref[[0, 2, 1, 3, 4, 5]], ref, tol=1e-3)  # a tie swapped
    assert not same_candidates(ref[[0, 1, 2, 4, 3, 5]], ref, tol=1e-3)  # scores out of place
    moved = ref.clone()
    moved[3, 0] += 1.0
    assert not same_candidates(moved, ref, tol=1e-3)  # a box moved by 1 px
    relabelled = ref.clone()
    relabelled[1, 5] = 2.0
    assert not same_candidates(relabelled, ref, tol=1e-3)


FAMS = sorted(families().items())


@pytest.mark.parametrize("name,fam", FAMS, ids=[n for n, _ in FAMS])
def test_every_family_passes_torch_export(name: str, fam: type, portable) -> None:
    """The front half of the ExecuTorch export, which needs only PyTorch: every registered
    family's fused network (raw outputs, smallest size, imgsz 64) passes ``torch.export`` and the
    exported program computes what the network computes. Lowering to XNNPACK (tens of seconds
    per family) is measured in docs/export.md, not repeated here."""
    from libreyolo.export.config import ExportConfig
    from libreyolo.export.executorch import export_program
    from libreyolo.export.graph import build_export_graph
    from libreyolo.model import Model

    torch.manual_seed(0)
    model = Model(fam(size=fam.SIZES[0], nc=3))
    s = -(-64 // model.stride) * model.stride  # 64 px, or a fixed-input family's own size (yolo1: 448)
    cfg = ExportConfig.from_overrides({"format": "executorch", "imgsz": s}, default_imgsz=s)
    graph, x, _ = build_export_graph(model.family, cfg)
    ep, ref = export_program(graph, x, model=model.family)
    probe = torch.rand_like(x)
    with torch.no_grad():
        got, want = ep.module()(probe), graph(probe)
    got = list(got) if isinstance(got, (list, tuple)) else [got]
    want = list(want) if isinstance(want, (list, tuple)) else [want]
    assert [r.shape for r in ref] == [w.shape for w in want]
    _close(want, got)
