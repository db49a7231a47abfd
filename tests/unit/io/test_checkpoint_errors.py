"""Every way a weights file can be unusable is one clear sentence (issue 19 item 5).

Never torch's own message (cut mid-sentence, advising the unsafe ``weights_only=False``), never
an ``IndexError`` from the error handler on an empty message, never a "Hub failure" for a file
that is simply not there.
"""

from __future__ import annotations

import sys
import types
from pathlib import Path

import pytest
import torch

from libreyolo import LibreYOLO
from libreyolo.cli.main import entrypoint
from libreyolo.errors import CheckpointError
from libreyolo.io import checkpoint as ckpt
from libreyolo.io import weights


@pytest.fixture(scope="module")
def tiny_bytes(tmp_path_factory: pytest.TempPathFactory) -> bytes:
    torch.manual_seed(0)
    m = LibreYOLO("LibreYOLO9t.pt", pretrained=False, nc=2, names=["cat", "dog"])
    return m.save(tmp_path_factory.mktemp("ck") / "LibreYOLO9t.pt").read_bytes()


def _ultralytics_pickle(path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """A file laid out like an Ultralytics ``.pt``: a pickled ``ultralytics.nn.tasks.DetectionModel``."""
    for name in ("ultralytics", "ultralytics.nn", "ultralytics.nn.tasks"):
        monkeypatch.setitem(sys.modules, name, types.ModuleType(name))

    class DetectionModel(torch.nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.conv = torch.nn.Conv2d(3, 4, 1)

    DetectionModel.__module__ = "ultralytics.nn.tasks"
    DetectionModel.__qualname__ = "DetectionModel"
    sys.modules["ultralytics.nn.tasks"].DetectionModel = DetectionModel  # type: ignore[attr-defined]
    torch.save({"model": DetectionModel(), "epoch": -1, "train_args": {}}, path)


def _case(kind: str, path: Path, tiny: bytes, monkeypatch: pytest.MonkeyPatch) -> None:
    if kind == "empty":
        path.write_bytes(b"")
    elif kind == "truncated":
        path.write_bytes(tiny[: len(tiny) // 2])
    elif kind == "truncated_header":
        path.write_bytes(tiny[:64])
    elif kind == "text":
        path.write_text("this is a README, not weights\n")
    elif kind == "state_dict":
        torch.save({"conv.weight": torch.zeros(4, 3, 1, 1), "conv.bias": torch.zeros(4)}, path)
    elif kind == "foreign_dict":
        torch.save({"model": {"conv.weight": torch.zeros(1)}, "epoch": 3}, path)
    elif kind == "ultralytics":
        _ultralytics_pickle(path, monkeypatch)
    elif kind == "tensor":
        torch.save(torch.zeros(3), path)
    elif kind == "no_model":
        torch.save({"libreyolo": {"family": "yolo9"}}, path)
    else:  # pragma: no cover
        raise AssertionError(kind)


CASES = {
    "empty": "is empty (0 bytes)",
    "truncated": "is truncated or corrupt",
    "truncated_header": "is truncated or corrupt",
    "text": "is not a PyTorch checkpoint",
    "state_dict": "is a plain state dict (2 tensors",
    "foreign_dict": "is not a libreyolo checkpoint",
    "ultralytics": "is an Ultralytics checkpoint",
    "tensor": "holds a single tensor",
    "no_model": "has no 'model' weights",
}


def _one_sentence(msg: str) -> None:
    assert "\n" not in msg and msg.endswith("."), msg
    assert "weights_only=False" not in msg and "arbitrary code" not in msg, msg  # torch's advice never leaks
    assert msg.replace("e.g. ", "").count(". ") == 0, msg  # one sentence (clauses joined by ";")


@pytest.mark.parametrize("kind", sorted(CASES))
def test_each_unusable_file_is_one_sentence(kind: str, tmp_path: Path, tiny_bytes: bytes,
                                            monkeypatch: pytest.MonkeyPatch) -> None:
    p = tmp_path / f"{kind}.pt"
    _case(kind, p, tiny_bytes, monkeypatch)
    with pytest.raises(CheckpointError) as e:
        LibreYOLO(str(p))
    msg = str(e.value)
    assert CASES[kind] in msg and str(p) in msg
    _one_sentence(msg)


@pytest.mark.parametrize("kind", ["empty", "truncated", "ultralytics"])
def test_cli_reports_them_in_one_line_with_exit_3(kind: str, tmp_path: Path, tiny_bytes: bytes, capsys,
                                                  monkeypatch: pytest.MonkeyPatch) -> None:
    p = tmp_path / f"{kind}.pt"
    _case(kind, p, tiny_bytes, monkeypatch)
    code = entrypoint(["predict", f"model={p}"])
    _, err = capsys.readouterr()
    assert code == 3 and err.startswith("libreyolo: error: ") and err.count("\n") == 1, err
    assert CASES[kind] in err and "unexpected error" not in err and "Traceback" not in err


def test_cli_error_handler_survives_an_empty_message(capsys, monkeypatch: pytest.MonkeyPatch) -> None:
    import dataclasses

    from libreyolo.cli import commands

    def boom(kw, quiet):
        raise CheckpointError("")

    monkeypatch.setitem(commands.COMMANDS, "version", dataclasses.replace(commands.COMMANDS["version"], run=boom))
    assert entrypoint(["version"]) == 3
    err = capsys.readouterr().err
    assert err == "libreyolo: error: CheckpointError\n"


def test_missing_local_path_is_not_a_hub_failure(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    def no_hub(*a, **k):  # the Hub must not even be asked
        raise AssertionError("Hub queried for a local path")

    monkeypatch.setattr(weights, "hub_download", no_hub)
    monkeypatch.setattr(weights, "hub_offline_reason", no_hub)
    with pytest.raises(CheckpointError) as e:
        LibreYOLO(str(tmp_path / "runs" / "best.pt"))
    msg = str(e.value)
    assert "does not exist" in msg and "Hub download" not in msg and "Hub cache" not in msg
    _one_sentence(msg)


def test_directory_as_model_says_directory(tmp_path: Path, tiny_bytes: bytes, monkeypatch) -> None:
    monkeypatch.setattr(weights, "hub_download", lambda *a, **k: (_ for _ in ()).throw(AssertionError("Hub")))
    (tmp_path / "weights").mkdir()
    (tmp_path / "weights" / "best.pt").write_bytes(tiny_bytes)
    with pytest.raises(CheckpointError) as e:
        LibreYOLO(str(tmp_path / "weights"))
    msg = str(e.value)
    assert "is a directory" in msg and "best.pt" in msg and "Hub" not in msg
    _one_sentence(msg)
    with pytest.raises(CheckpointError, match="is a directory"):
        ckpt.read_checkpoint(tmp_path / "weights")


def test_pickled_stdlib_call_is_refused_without_running(tmp_path: Path) -> None:
    import os

    class Evil:
        def __reduce__(self):  # noqa: D105
            return (os.system, ("echo pwned > " + str(tmp_path / "owned"),))

    p = tmp_path / "evil.pt"
    torch.save({"libreyolo": {}, "model": Evil()}, p)
    with pytest.raises(CheckpointError) as e:
        LibreYOLO(str(p))
    assert not (tmp_path / "owned").exists()
    assert "pickled Python objects" in str(e.value) and "never unpickles" in str(e.value)
    _one_sentence(str(e.value))


def test_safetensors_errors_are_one_sentence(tmp_path: Path) -> None:
    from safetensors.torch import save_file

    bad = tmp_path / "bad.safetensors"
    bad.write_bytes(b"\x10\x00\x00\x00\x00\x00\x00\x00{not json")
    with pytest.raises(CheckpointError, match="not a readable safetensors file") as e:
        ckpt.read_checkpoint(bad)
    _one_sentence(str(e.value))
    plain = tmp_path / "plain.safetensors"
    save_file({"w": torch.zeros(2)}, str(plain))
    with pytest.raises(CheckpointError, match="no 'libreyolo' metadata") as e:
        ckpt.read_checkpoint(plain)
    _one_sentence(str(e.value))


def test_missing_bare_file_that_is_no_weights_name_is_not_looked_up(tmp_path: Path, monkeypatch) -> None:
    monkeypatch.chdir(tmp_path)
    monkeypatch.setattr(weights, "hub_download", lambda *a, **k: (_ for _ in ()).throw(AssertionError("Hub")))
    with pytest.raises(CheckpointError) as e:
        LibreYOLO("best.pt")
    msg = str(e.value)
    assert "does not exist in" in msg and "nothing was looked up on the Hub" in msg
    _one_sentence(msg)
    for name in ("LibreYOLO9t.pt", "LibreYOLO9t", "LibreRTDETRr18-seg.safetensors", "libreyolo9s.pt"):
        assert weights._WEIGHTS_NAME.match(name), name  # these still go on to bundled / Hub weights
