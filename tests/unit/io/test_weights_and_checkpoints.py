"""Weights resolution (local -> env dir -> bundled -> Hub cache/download) and the checkpoint contract."""

from __future__ import annotations

import os
import time
from pathlib import Path

import pytest
import torch

from libreyolo import LibreYOLO
from libreyolo.errors import CheckpointError, ConfigError
from libreyolo.io import checkpoint as ckpt
from libreyolo.io import weights


@pytest.fixture()
def tiny_ckpt(tmp_path: Path) -> Path:
    torch.manual_seed(0)
    m = LibreYOLO("LibreYOLO9t.pt", pretrained=False, nc=2, names=["cat", "dog"])
    return m.save(tmp_path / "LibreYOLO9t.pt")


def test_local_path_round_trip_keeps_weights_and_metadata(tiny_ckpt: Path) -> None:
    m = LibreYOLO(str(tiny_ckpt))
    ref = torch.load(tiny_ckpt, weights_only=True)
    assert m.names == {0: "cat", 1: "dog"} and m.nc == 2 and m.FAMILY == "yolo9"
    for k, v in m.net.state_dict().items():
        assert torch.equal(v, ref["model"][k]), k


def test_safetensors_round_trip(tmp_path: Path) -> None:
    m = LibreYOLO("LibreYOLO9t.pt", pretrained=False, nc=2)
    p = m.save(tmp_path / "w.safetensors")
    m2 = LibreYOLO(str(p))
    assert all(torch.equal(a, b) for a, b in zip(m.net.state_dict().values(), m2.net.state_dict().values(), strict=True))


def test_weights_dir_env_is_searched(tiny_ckpt: Path, monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    monkeypatch.chdir(tmp_path / "..")
    monkeypatch.setenv("LIBREYOLO_WEIGHTS_DIR", str(tiny_ckpt.parent))
    assert weights.find_weights("LibreYOLO9t.pt") == tiny_ckpt


def test_hub_cache_is_used_offline(tiny_ckpt: Path, monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    """The real huggingface_hub lookup, against a local cache laid out as the Hub client writes it."""
    cache = tmp_path / "hub"
    snap = cache / "models--acme--weights" / "snapshots" / ("a" * 40)
    snap.mkdir(parents=True)
    (cache / "models--acme--weights" / "refs").mkdir()
    (cache / "models--acme--weights" / "refs" / "main").write_text("a" * 40)
    (snap / "LibreYOLO9s.pt").write_bytes(tiny_ckpt.read_bytes())
    monkeypatch.setenv("HF_HUB_CACHE", str(cache))
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    monkeypatch.setenv("LIBREYOLO_HUB_REPO", "acme/weights")
    import huggingface_hub.constants as c

    monkeypatch.setattr(c, "HF_HUB_CACHE", str(cache))
    found = weights.find_weights("LibreYOLO9s.pt")
    assert found.name == "LibreYOLO9s.pt" and found.read_bytes() == tiny_ckpt.read_bytes()


def test_offline_miss_fails_fast_listing_what_was_tried(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    monkeypatch.setenv("HF_HUB_CACHE", str(tmp_path / "empty"))
    t0 = time.perf_counter()
    with pytest.raises(CheckpointError) as e:
        LibreYOLO("LibreYOLO9m.pt")
    msg = str(e.value)
    assert time.perf_counter() - t0 < 10
    for part in ("local path", "bundled weights", "Hub cache", "HF_HUB_OFFLINE", "pretrained=False"):
        assert part in msg, part


def test_download_is_attempted_when_online(monkeypatch: pytest.MonkeyPatch, tiny_ckpt: Path) -> None:
    calls = []

    def fake_download(filename: str, *, repo_id: str, local_files_only: bool) -> str:
        calls.append(local_files_only)
        if local_files_only:
            raise FileNotFoundError("not cached")
        return str(tiny_ckpt)

    monkeypatch.setattr(weights, "hub_download", fake_download)
    monkeypatch.setattr(weights, "hub_offline_reason", lambda: None)
    assert weights.find_weights("LibreYOLO9c.pt") == tiny_ckpt
    assert calls == [True, False]


def test_unknown_family_name_suggests(monkeypatch: pytest.MonkeyPatch) -> None:
    with pytest.raises(ConfigError, match="no registered family matches"):
        LibreYOLO("LibreYOLO42t.pt", pretrained=False)
    with pytest.raises(ConfigError, match="sizes|Known names"):
        LibreYOLO("LibreYOLO9q.pt", pretrained=False)
    with pytest.raises(ConfigError, match="cannot read a model name"):
        LibreYOLO("resnet.pt", pretrained=False)


def test_corrupt_and_foreign_files_are_clear_errors(tmp_path: Path, tiny_ckpt: Path) -> None:
    bad = tmp_path / "bad.pt"
    bad.write_bytes(tiny_ckpt.read_bytes()[:1000])
    with pytest.raises(CheckpointError, match="is truncated or corrupt"):
        LibreYOLO(str(bad))
    foreign = tmp_path / "foreign.pt"
    torch.save({"state_dict": {}}, foreign)
    with pytest.raises(CheckpointError, match="not a libreyolo checkpoint"):
        LibreYOLO(str(foreign))


def test_pickled_code_is_never_executed(tmp_path: Path) -> None:
    class Evil:
        def __reduce__(self):  # noqa: D105
            return (os.system, ("echo pwned > " + str(tmp_path / "owned"),))

    p = tmp_path / "evil.pt"
    torch.save({"libreyolo": {}, "model": Evil()}, p)
    with pytest.raises(CheckpointError):
        LibreYOLO(str(p))
    assert not (tmp_path / "owned").exists()


def test_metadata_that_does_not_match_weights(tmp_path: Path, tiny_ckpt: Path) -> None:
    obj = torch.load(tiny_ckpt, weights_only=True)
    obj["libreyolo"]["size"] = "s"  # t weights labelled as s
    p = tmp_path / "mislabelled.pt"
    torch.save(obj, p)
    with pytest.raises(CheckpointError, match="do not match a yolo9-s"):
        LibreYOLO(str(p))
    obj = torch.load(tiny_ckpt, weights_only=True)
    del obj["libreyolo"]["nc"]
    torch.save(obj, p)
    with pytest.raises(CheckpointError, match="lacks nc"):
        LibreYOLO(str(p))


def test_atomic_save_crash_between_write_and_rename(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    target = tmp_path / "last.pt"
    ckpt.atomic_save({"v": torch.tensor(1)}, target)

    def crash(src: str, dst: str) -> None:
        raise KeyboardInterrupt("killed between write and rename")

    monkeypatch.setattr(os, "replace", crash)
    with pytest.raises(KeyboardInterrupt):
        ckpt.atomic_save({"v": torch.tensor(2)}, target)
    monkeypatch.undo()
    assert int(torch.load(target, weights_only=True)["v"]) == 1
    assert [p.name for p in tmp_path.iterdir()] == ["last.pt"]


def test_in_place_weight_load_keeps_parameter_addresses(tiny_ckpt: Path) -> None:
    m = LibreYOLO("LibreYOLO9t.pt", pretrained=False, nc=2)
    ptrs = [p.data_ptr() for p in m.net.parameters()]
    m.load_weights(torch.load(tiny_ckpt, weights_only=True)["model"])
    assert [p.data_ptr() for p in m.net.parameters()] == ptrs
