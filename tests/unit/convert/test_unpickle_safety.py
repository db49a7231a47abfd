"""The restricted unpickler never runs code from a file (SPEC U-1, issue 18): a booby-trapped
pickle gives an inert stub or a one-line error, truncated and wrong-family files one-line errors."""

from __future__ import annotations

import io
import os
import zipfile
from pathlib import Path

import pytest
import torch

from libreyolo import LibreYOLO
from libreyolo.convert import detect_format, read_foreign
from libreyolo.convert.unpickle import Stub, module_state_dict, pickle_globals, read_foreign_pickle
from libreyolo.errors import CheckpointError


def _zip(path: Path, payload: bytes) -> Path:
    with zipfile.ZipFile(path, "w") as z:
        z.writestr("archive/data.pkl", payload)
        z.writestr("archive/version", "3\n")
    return path


def _evil_pickle(marker: Path, *, ultralytics_model: bool) -> bytes:
    """Protocol-2 pickle, written opcode by opcode: {"model": <DetectionModel>?, "x": os.system(cmd)}."""
    cmd = f"touch {marker}".encode()
    out = io.BytesIO()
    out.write(b"\x80\x02}(")  # PROTO 2, EMPTY_DICT, MARK
    if ultralytics_model:
        out.write(b"X\x05\x00\x00\x00model")
        out.write(b"cultralytics.nn.tasks\nDetectionModel\n)\x81}X\x08\x00\x00\x00_modules}sb")
    out.write(b"X\x01\x00\x00\x00x")
    out.write(b"cposix\nsystem\n" + b"X" + len(cmd).to_bytes(4, "little") + cmd + b"\x85R")  # TUPLE1, REDUCE
    out.write(b"X\x01\x00\x00\x00y")  # a second trap through a builtin: eval
    code = f"__import__('os').system('touch {marker}')".encode()
    out.write(b"cbuiltins\neval\n" + b"X" + len(code).to_bytes(4, "little") + code + b"\x85R")
    out.write(b"u.")  # SETITEMS, STOP
    return out.getvalue()


@pytest.mark.parametrize("ultralytics_model", [False, True])
def test_booby_trapped_pickle_runs_nothing(tmp_path: Path, ultralytics_model: bool) -> None:
    marker = tmp_path / "pwned"
    path = _zip(tmp_path / "evil.pt", _evil_pickle(marker, ultralytics_model=ultralytics_model))
    obj = read_foreign_pickle(path)
    assert not marker.exists()
    assert isinstance(obj["x"], Stub) and obj["x"]._stub_name == "posix.system"
    assert isinstance(obj["y"], Stub) and obj["y"]._stub_name == "builtins.eval"
    # through the public entry point: one line, nothing run
    with pytest.raises(CheckpointError) as e:
        LibreYOLO(str(path))
    assert "\n" not in str(e.value)
    assert not marker.exists()
    assert ("posix.system" in pickle_globals(path))
    assert (detect_format(path) == "ultralytics") == ultralytics_model


def test_torch_saved_reduce_trap_is_a_stub(tmp_path: Path) -> None:
    marker = tmp_path / "pwned2"

    class Trap:
        def __reduce__(self):
            return (os.system, (f"touch {marker}",))

    path = tmp_path / "trap.pt"
    torch.save({"model": Trap(), "w": torch.ones(2)}, path)
    obj = read_foreign_pickle(path)
    assert not marker.exists()
    assert isinstance(obj["model"], Stub) and torch.equal(obj["w"], torch.ones(2))


def test_tensors_and_containers_round_trip(tmp_path: Path) -> None:
    sd = {"a": torch.arange(6.0).view(2, 3)[:, 1:], "b": torch.tensor([1, 2], dtype=torch.int64),
          "c": torch.randn(3, dtype=torch.float16), "p": torch.nn.Parameter(torch.ones(2)), "s": {1, 2},
          "n": [1.5, "x", (None, True)], "z": torch.empty(0)}
    path = tmp_path / "plain.pt"
    torch.save(sd, path)
    back = read_foreign_pickle(path)
    for k in ("a", "b", "c", "p", "z"):
        assert torch.equal(back[k], sd[k]) and back[k].dtype == sd[k].dtype, k
    assert back["s"] == {1, 2} and back["n"] == [1.5, "x", (None, True)]
    m = torch.nn.Sequential(torch.nn.Conv2d(2, 3, 1), torch.nn.BatchNorm2d(3))
    torch.save({"model": m}, path)
    got = module_state_dict(read_foreign_pickle(path)["model"])
    assert list(got) == list(m.state_dict())
    assert all(torch.equal(got[k], v) for k, v in m.state_dict().items())


def test_truncated_foreign_file_is_one_line_error(tmp_path: Path) -> None:
    m = torch.nn.Conv2d(2, 3, 1)
    full = tmp_path / "full.pt"
    torch.save({"model": m}, full)
    cut = tmp_path / "cut.pt"
    cut.write_bytes(full.read_bytes()[: full.stat().st_size // 2])
    for call in (lambda: read_foreign_pickle(cut), lambda: LibreYOLO(str(cut))):
        with pytest.raises(CheckpointError) as e:
            call()
        assert "\n" not in str(e.value) and "truncated" in str(e.value)


def test_wrong_family_ultralytics_file_is_one_line_error(tmp_path: Path) -> None:
    """An Ultralytics model that is no libreyolo family (here: a pickled model of classes named like
    Ultralytics' YOLOv8 layers, whose tensors fit nothing) is recognised and refused in one line."""
    payload = (b"\x80\x02}(X\x05\x00\x00\x00model"
               b"cultralytics.nn.tasks\nDetectionModel\n)\x81}(X\x08\x00\x00\x00_modules}"
               b"X\x0b\x00\x00\x00_parameters}X\x04\x00\x00\x00yaml}X\t\x00\x00\x00yaml_file"
               b"X\x0b\x00\x00\x00yolov8n.yamlsusbu.")
    path = _zip(tmp_path / "yolov8n.pt", payload)
    assert detect_format(path) == "ultralytics"
    with pytest.raises(CheckpointError) as e:
        read_foreign(path)
    assert "\n" not in str(e.value)


def test_huge_allocation_through_bytes_is_refused(tmp_path: Path) -> None:
    payload = b"\x80\x02cbuiltins\nbytes\nJ\x00\x00\x00\x7f\x85R."  # bytes(2**31 - 2**24): 2 GB
    path = _zip(tmp_path / "big.pt", payload)
    with pytest.raises(CheckpointError) as e:
        read_foreign_pickle(path)
    assert "\n" not in str(e.value) and "refused" in str(e.value)
