"""Fault injection for checkpoint writes: SIGKILL at every step of a save, random kills, a full disk.

The invariant: what was saved before is never lost (``last.pt`` is always a complete checkpoint,
the old one or the new one), and the next save says what happened (a WARNING naming the partial
file it removed) and leaves no partial files behind.
"""

from __future__ import annotations

import errno
import hashlib
import io
import logging
import os
import random
import tempfile
from pathlib import Path

import pytest
import torch

from libreyolo.errors import CheckpointError
from libreyolo.io import checkpoint as ck


def _payload(version: int) -> dict:
    return {"libreyolo": {"family": "yolo9", "size": "t", "task": "detect", "nc": 1, "names": {0: "x"}},
            "model": {"w": torch.full((1024, 1024), float(version))}, "version": version}


def _version(path: Path) -> int:
    """The version of a complete checkpoint (every value checked, so a torn file cannot pass)."""
    obj = ck.read_checkpoint(path)
    v = int(obj["version"])
    assert torch.equal(obj["model"]["w"], torch.full((1024, 1024), float(v)))
    return v


def _digest(path: Path) -> str:
    return hashlib.sha256(path.read_bytes()).hexdigest()


def _partials(folder: Path) -> list[str]:
    return sorted(p.name for p in folder.iterdir() if p.name.startswith(".") and p.name.endswith(".tmp"))


def _next_save_reports(folder: Path, caplog: pytest.LogCaptureFixture, *, expect_partial: bool,
                       had_complete: bool) -> None:
    """The next run's save: it names the partial file it removed and what state last.pt is in."""
    caplog.clear()
    with caplog.at_level(logging.WARNING, logger="libreyolo.io.checkpoint"):
        ck.atomic_save(_payload(9), folder / "last.pt")
    notes = [r.getMessage() for r in caplog.records]
    if expect_partial:
        assert len(notes) == 1 and "partial file left by an interrupted write" in notes[0], notes
        assert ("the last complete last.pt is intact" if had_complete else "no complete last.pt") in notes[0]
    else:
        assert notes == []
    assert _partials(folder) == [] and _version(folder / "last.pt") == 9


# ------------------------------------------------------------------ SIGKILL at each step
@pytest.mark.parametrize(("point", "survivor", "partial_left"), [
    ("before_write", 1, True), ("mid_write", 1, True), ("before_rename", 1, True), ("after_rename", 2, False)])
def test_kill_at_each_step_of_a_save_loses_nothing(killer, tmp_path: Path, caplog, point: str, survivor: int,
                                                   partial_left: bool) -> None:
    ck.atomic_save(_payload(1), tmp_path / "last.pt")
    before = _digest(tmp_path / "last.pt")
    killer("ckpt", tmp_path, point)
    assert _version(tmp_path / "last.pt") == survivor  # always a complete checkpoint
    if survivor == 1:
        assert _digest(tmp_path / "last.pt") == before  # byte for byte what was saved before
    assert bool(_partials(tmp_path)) == partial_left
    _next_save_reports(tmp_path, caplog, expect_partial=partial_left, had_complete=True)


def test_kill_during_the_first_save_leaves_no_torn_file(killer, tmp_path: Path, caplog) -> None:
    killer("ckpt", tmp_path, "mid_write")
    assert not (tmp_path / "last.pt").exists() and len(_partials(tmp_path)) == 1
    with pytest.raises(CheckpointError, match="does not exist"):  # resume says so, it does not load a torn file
        ck.read_checkpoint(tmp_path / "last.pt")
    _next_save_reports(tmp_path, caplog, expect_partial=True, had_complete=False)


@pytest.mark.parametrize("seed", range(5))
def test_random_kills_while_saving_in_a_loop(killer, tmp_path: Path, seed: int) -> None:
    """Killed at a random moment among back-to-back saves: last.pt is one complete version."""
    delay = random.Random(seed).uniform(0.0, 0.6)
    killer("ckpt_loop", tmp_path, after_ready_s=delay)
    assert _version(tmp_path / "last.pt") >= 1
    assert len(_partials(tmp_path)) <= 1
    ck.remove_stale_partials(tmp_path / "last.pt")
    assert _partials(tmp_path) == []


def test_a_live_writers_partial_file_is_left_alone(tmp_path: Path) -> None:
    """Two processes saving to one folder: clean-up removes only files of processes that are gone."""
    mine = tmp_path / f".last.pt.{os.getpid()}.abcdef.tmp"
    mine.write_bytes(b"in progress")
    dead = tmp_path / ".last.pt.999999999.abcdef.tmp"  # no such pid
    dead.write_bytes(b"left over")
    legacy_fresh = tmp_path / ".last.pt.q1w2e3r4.tmp"  # old naming, no pid: kept while recent
    legacy_fresh.write_bytes(b"?")
    assert ck.remove_stale_partials(tmp_path / "last.pt") == [dead]
    assert mine.exists() and legacy_fresh.exists()
    os.utime(legacy_fresh, (0, 0))
    assert ck.remove_stale_partials(tmp_path / "last.pt") == [legacy_fresh]


# ------------------------------------------------------------------ a full disk
def _enospc(*_a, **_k):
    raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC))


def _half_then_enospc(obj, f) -> None:
    buf = io.BytesIO()
    _real_save(obj, buf)
    f.write(buf.getvalue()[: len(buf.getvalue()) // 2])
    raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC))


_real_save = torch.save


@pytest.mark.parametrize("where", ["mid_write", "fsync", "tempfile", "rename"])
def test_disk_full_keeps_the_previous_checkpoint(tmp_path: Path, monkeypatch, where: str) -> None:
    target = tmp_path / "last.pt"
    ck.atomic_save(_payload(1), target)
    before = _digest(target)
    patch = {"mid_write": (torch, "save", _half_then_enospc), "fsync": (os, "fsync", _enospc),
             "tempfile": (tempfile, "mkstemp", _enospc), "rename": (os, "replace", _enospc)}[where]
    monkeypatch.setattr(*patch)
    with pytest.raises(CheckpointError) as e:
        ck.atomic_save(_payload(2), target)
    monkeypatch.undo()
    msg = str(e.value)
    assert "no space left on the device" in msg and "the previous last.pt is unchanged" in msg, msg
    assert "\n" not in msg and msg.endswith(".")
    assert _digest(target) == before and _partials(tmp_path) == []


def test_disk_full_on_the_first_save_says_nothing_was_lost(tmp_path: Path, monkeypatch) -> None:
    monkeypatch.setattr(torch, "save", _half_then_enospc)
    with pytest.raises(CheckpointError, match="no earlier best.pt existed, so nothing was lost"):
        ck.atomic_save(_payload(1), tmp_path / "best.pt")
    assert list(tmp_path.iterdir()) == []


@pytest.mark.parametrize("suffix", [".pt", ".safetensors"])
def test_disk_full_through_save_model_both_formats(tmp_path: Path, monkeypatch, suffix: str) -> None:
    """The writer the trainer and model.save() use, for .pt and .safetensors."""
    from libreyolo import LibreYOLO

    model = LibreYOLO("LibreYOLO9t.pt", pretrained=False, nc=2)
    path = model.save(tmp_path / f"w{suffix}")
    before = _digest(path)
    real_fdopen = os.fdopen

    class _Full(io.FileIO):
        def write(self, b) -> int:
            raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC))

    monkeypatch.setattr(os, "fdopen", lambda fd, mode="r", *a, **k: _Full(fd, "wb") if "w" in mode
                        else real_fdopen(fd, mode, *a, **k))
    with pytest.raises(CheckpointError) as e:
        model.save(path)
    assert f"(no space left on the device); the previous w{suffix} is unchanged" in str(e.value)
    monkeypatch.undo()
    assert _digest(path) == before and _partials(tmp_path) == []
    assert LibreYOLO(str(path)).nc == 2


def test_real_os_write_limit_keeps_the_previous_checkpoint(child, tmp_path: Path) -> None:
    """No patching: the kernel refuses the write (RLIMIT_FSIZE, EFBIG) as a full disk would."""
    small = {"libreyolo": {"family": "yolo9", "size": "t", "task": "detect", "nc": 1, "names": {0: "x"}},
             "model": {"w": torch.ones(8)}, "version": 1}
    ck.atomic_save(small, tmp_path / "last.pt")
    before = _digest(tmp_path / "last.pt")
    proc = child("fsize", tmp_path)
    assert proc.returncode == 0, proc.stderr[-2000:]
    assert "CheckpointError: cannot write checkpoint" in proc.stdout and "the previous last.pt is unchanged" in proc.stdout
    assert _digest(tmp_path / "last.pt") == before and _partials(tmp_path) == []
