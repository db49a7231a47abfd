"""Fault injection for the built-in dataset generator and for ONNX export.

Killed mid-way, neither leaves something that the next run mistakes for a finished result: the
shapes dataset appears only complete (the next run removes the partial folder, says so, and
generates it again); an export never leaves a broken ``.onnx`` nor destroys the previous one.
"""

from __future__ import annotations

import hashlib
import logging
from pathlib import Path

import pytest

from libreyolo.data.config import load_data_config
from libreyolo.data.shapes import ensure_shapes_dataset
from libreyolo.errors import ExportError

N_TRAIN, N_VAL, IMGSZ = 120, 24, 64  # what the child generates


def _complete(yaml_path: Path) -> None:
    cfg = load_data_config(str(yaml_path))
    assert (len(cfg.train), len(cfg.val)) == (N_TRAIN, N_VAL)
    root = yaml_path.parent
    for split, n in (("train", N_TRAIN), ("val", N_VAL)):
        labels = sorted((root / "labels" / split).glob("*.txt"))
        assert len(labels) == n and all(p.stat().st_size > 0 for p in labels)


@pytest.mark.parametrize("point", ["mid_images", "before_rename"])
def test_kill_during_dataset_generation(killer, tmp_path: Path, caplog, point: str) -> None:
    killer("shapes", tmp_path, point)
    leftovers = [p for p in tmp_path.iterdir() if p.name.startswith(".shapes-")]
    finals = [p for p in tmp_path.iterdir() if p.name.startswith("shapes-")]
    assert len(leftovers) == 1 and finals == []  # a killed run never looks finished
    with caplog.at_level(logging.WARNING, logger="libreyolo.data.shapes"):
        yaml_path = ensure_shapes_dataset(tmp_path, n_train=N_TRAIN, n_val=N_VAL, imgsz=IMGSZ)
    _complete(yaml_path)
    notes = [r.getMessage() for r in caplog.records]
    assert len(notes) == 1 and "incomplete shapes dataset" in notes[0] and leftovers[0].name in notes[0], notes
    assert not leftovers[0].exists() and [p.name for p in tmp_path.iterdir() if p.name.startswith(".")] == []


def test_a_generation_in_progress_elsewhere_is_not_removed(tmp_path: Path) -> None:
    import os

    from libreyolo.data import shapes

    busy = tmp_path / f".shapes-abc.tmp-{os.getppid()}-deadbeef"  # a live process (our parent)
    (busy / "images" / "train").mkdir(parents=True)
    gone = tmp_path / ".shapes-abc.tmp-999999999-deadbeef"
    (gone / "images" / "train").mkdir(parents=True)
    shapes._remove_stale_tmp(tmp_path, "shapes-abc")
    assert busy.exists() and not gone.exists()


# ------------------------------------------------------------------ export
@pytest.fixture(scope="module")
def first_export(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, str]:
    """A good m.onnx (nc=2) from an earlier run: what must survive."""
    from libreyolo import LibreYOLO

    folder = tmp_path_factory.mktemp("export")
    path = LibreYOLO("LibreYOLO9t.pt", pretrained=False, nc=2).export(format="onnx", imgsz=64,
                                                                       file=str(folder / "m.onnx"))
    return path, hashlib.sha256(path.read_bytes()).hexdigest()


def _fresh_copy(first: tuple[Path, str], folder: Path) -> Path:
    folder.mkdir(parents=True, exist_ok=True)
    dst = folder / "m.onnx"
    dst.write_bytes(first[0].read_bytes())
    return dst


@pytest.mark.parametrize("point", ["mid_trace", "before_rename"])
def test_kill_during_export_keeps_the_previous_file(killer, first_export, tmp_path: Path, caplog, point: str) -> None:
    from libreyolo import LibreYOLO

    path = _fresh_copy(first_export, tmp_path)
    killer("export", tmp_path, point)
    assert hashlib.sha256(path.read_bytes()).hexdigest() == first_export[1]
    assert LibreYOLO(str(path)).nc == 2  # still the earlier, complete export
    partial = [p.name for p in tmp_path.iterdir() if p.name.endswith(".tmp")]
    assert len(partial) == 1
    with caplog.at_level(logging.WARNING, logger="libreyolo.io.checkpoint"):
        LibreYOLO("LibreYOLO9t.pt", pretrained=False, nc=3).export(format="onnx", imgsz=64, file=str(path))
    assert any(partial[0] in r.getMessage() and "interrupted write" in r.getMessage() for r in caplog.records)
    assert LibreYOLO(str(path)).nc == 3 and [p for p in tmp_path.iterdir() if p.name.endswith(".tmp")] == []


@pytest.mark.parametrize("failure", ["checker", "disk_full"])
def test_failed_export_keeps_the_previous_file(first_export, tmp_path: Path, monkeypatch, failure: str) -> None:
    import errno
    import os

    import onnx

    from libreyolo import LibreYOLO

    path = _fresh_copy(first_export, tmp_path)
    model = LibreYOLO("LibreYOLO9t.pt", pretrained=False, nc=3)
    if failure == "checker":
        def bad(_proto) -> None:
            raise onnx.checker.ValidationError("graph is invalid")
        monkeypatch.setattr(onnx.checker, "check_model", bad)
        expected: type[Exception] = onnx.checker.ValidationError
    else:
        def full(*_a, **_k):
            raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC))
        monkeypatch.setattr(os, "fsync", full)
        expected = ExportError
    with pytest.raises(expected) as e:
        model.export(format="onnx", imgsz=64, file=str(path))
    monkeypatch.undo()
    if failure == "disk_full":
        assert "no space left on the device" in str(e.value) and "the previous m.onnx is unchanged" in str(e.value)
    assert hashlib.sha256(path.read_bytes()).hexdigest() == first_export[1]
    assert [p.name for p in tmp_path.iterdir()] == ["m.onnx"]
