"""Dataset yaml parsing: every train/val form, names forms, and each bad input."""

from __future__ import annotations

from pathlib import Path

import pytest

from libreyolo.data.config import load_data_config
from libreyolo.errors import DatasetError


@pytest.fixture
def ds_root(tmp_path: Path, write_image) -> Path:
    for split, n in (("train", 3), ("val", 2)):
        for i in range(n):
            write_image(tmp_path / "images" / split / f"{split}{i}.jpg")
    write_image(tmp_path / "images" / "extra" / "e0.png")
    return tmp_path


def _yaml(root: Path, text: str) -> Path:
    p = root / "data.yaml"
    p.write_text(text)
    return p


def test_shapes_yaml_loads(tiny_shapes: Path) -> None:
    cfg = load_data_config(tiny_shapes)
    assert cfg.nc == 6 and cfg.names[0] == "circle" and cfg.names[5] == "cross"
    assert len(cfg.train) == 8 and len(cfg.val) == 4
    assert all(p.is_file() and p.suffix == ".jpg" for p in cfg.train + cfg.val)
    assert cfg.yaml_path == tiny_shapes.resolve()
    # a folder holding data.yaml works too
    assert load_data_config(tiny_shapes.parent).train == cfg.train


def test_folder_form_and_default_path(ds_root: Path) -> None:
    cfg = load_data_config(_yaml(ds_root, "train: images/train\nval: images/val\nnames: [a, b]\n"))
    assert cfg.root == ds_root.resolve()
    assert [p.name for p in cfg.train] == ["train0.jpg", "train1.jpg", "train2.jpg"]
    assert [p.name for p in cfg.val] == ["val0.jpg", "val1.jpg"]
    assert cfg.names == {0: "a", 1: "b"} and cfg.nc == 2


def test_list_file_form(ds_root: Path) -> None:
    (ds_root / "lists").mkdir()
    (ds_root / "lists" / "train.txt").write_text(
        f"../images/train/train0.jpg\n\n# comment\n{ds_root / 'images/train/train2.jpg'}\n")
    cfg = load_data_config(_yaml(ds_root, f"path: {ds_root}\ntrain: lists/train.txt\nval: images/val\n"
                                          "names: {0: a, 1: b, 2: c}\nnc: 3\n"))
    assert [p.name for p in cfg.train] == ["train0.jpg", "train2.jpg"]
    assert cfg.names == {0: "a", 1: "b", 2: "c"}


def test_list_of_entries_deduplicated(ds_root: Path) -> None:
    (ds_root / "val.txt").write_text("images/val/val0.jpg\n")
    cfg = load_data_config(_yaml(ds_root, "path: .\ntrain: [images/train, images/extra, images/train/train0.jpg]\n"
                                          "val: [val.txt, images/val]\nnames: ['x']\n"))
    assert [p.name for p in cfg.train] == ["e0.png", "train0.jpg", "train1.jpg", "train2.jpg"]
    assert [p.name for p in cfg.val] == ["val0.jpg", "val1.jpg"]


def test_relative_path_key(tmp_path: Path, write_image) -> None:
    write_image(tmp_path / "set" / "images" / "t" / "a.jpg")
    (tmp_path / "cfg").mkdir()
    p = tmp_path / "cfg" / "d.yaml"
    p.write_text("path: ../set\ntrain: images/t\nval: images/t\nnames: [a]\n")
    assert load_data_config(p).train[0].name == "a.jpg"


def test_builtin_name_routes_to_generator(monkeypatch: pytest.MonkeyPatch, tiny_shapes: Path) -> None:
    import libreyolo.data.shapes as shapes

    calls = []
    monkeypatch.setattr(shapes, "ensure_shapes_dataset", lambda *a, **k: calls.append(k) or tiny_shapes)
    assert load_data_config("shapes").nc == 6 and calls == [{}]


@pytest.mark.parametrize("key", ["train", "val", "names"])
def test_missing_key_is_named(ds_root: Path, key: str) -> None:
    doc = {"train": "train: images/train", "val": "val: images/val", "names": "names: [a]"}
    del doc[key]
    with pytest.raises(DatasetError, match=f"missing key '{key}'"):
        load_data_config(_yaml(ds_root, "\n".join(doc.values()) + "\n"))


def test_malformed_yaml(ds_root: Path) -> None:
    with pytest.raises(DatasetError, match="malformed"):
        load_data_config(_yaml(ds_root, "train: [images/train\nval: : :\n"))
    with pytest.raises(DatasetError, match="must be a mapping"):
        load_data_config(_yaml(ds_root, "- just\n- a list\n"))


def test_missing_yaml_file(tmp_path: Path) -> None:
    with pytest.raises(DatasetError, match="not found"):
        load_data_config(tmp_path / "nope.yaml")


def test_missing_image_folder(ds_root: Path) -> None:
    with pytest.raises(DatasetError, match=r"'val' folder or file .*images/missing does not exist"):
        load_data_config(_yaml(ds_root, "train: images/train\nval: images/missing\nnames: [a]\n"))
    with pytest.raises(DatasetError, match="dataset root 'path'"):
        load_data_config(_yaml(ds_root, "path: /no/such/dir\ntrain: a\nval: b\nnames: [a]\n"))


def test_empty_split(ds_root: Path) -> None:
    (ds_root / "images" / "empty").mkdir()
    with pytest.raises(DatasetError, match="contains no images"):
        load_data_config(_yaml(ds_root, "train: images/empty\nval: images/val\nnames: [a]\n"))


def test_bad_names_and_nc(ds_root: Path) -> None:
    base = "train: images/train\nval: images/val\n"
    with pytest.raises(DatasetError, match="'nc'"):
        load_data_config(_yaml(ds_root, base + "names: [a, b]\nnc: 3\n"))
    with pytest.raises(DatasetError, match="without gaps"):
        load_data_config(_yaml(ds_root, base + "names: {0: a, 2: b}\n"))
    with pytest.raises(DatasetError, match="'names' is empty"):
        load_data_config(_yaml(ds_root, base + "names: []\n"))
