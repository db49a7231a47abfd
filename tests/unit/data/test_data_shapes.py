"""The built-in shapes generator: determinism, tight labels, atomic generation, sample image."""

from __future__ import annotations

import hashlib
from pathlib import Path

import cv2
import numpy as np
import pytest

import libreyolo.data.shapes as shapes
from libreyolo.data.config import load_data_config
from libreyolo.data.labels import parse_label_file


def _digest(root: Path) -> dict[str, str]:
    return {str(p.relative_to(root)): hashlib.sha256(p.read_bytes()).hexdigest()
            for p in sorted(root.rglob("*")) if p.is_file() and p.suffix in (".jpg", ".txt")}


def test_layout_and_yaml(tiny_shapes: Path) -> None:
    root = tiny_shapes.parent
    assert root.name.startswith("shapes-")
    assert len(list((root / "images" / "train").glob("*.jpg"))) == 8
    assert len(list((root / "labels" / "val").glob("*.txt"))) == 4
    cfg = load_data_config(tiny_shapes)
    assert list(cfg.names.values()) == list(shapes.NAMES)
    for f in cfg.train:
        img = cv2.imread(str(f))
        assert max(img.shape[:2]) == 64 and min(img.shape[:2]) >= 38
        lab = parse_label_file(Path(str(f).replace("/images/", "/labels/")).with_suffix(".txt"), nc=6)
        assert 1 <= len(lab) <= 8


def test_same_seed_identical_bytes_other_seed_differs(tmp_path: Path) -> None:
    a = shapes.ensure_shapes_dataset(tmp_path / "a", n_train=6, n_val=2, imgsz=64, seed=3)
    b = shapes.ensure_shapes_dataset(tmp_path / "b", n_train=6, n_val=2, imgsz=64, seed=3)
    c = shapes.ensure_shapes_dataset(tmp_path / "c", n_train=6, n_val=2, imgsz=64, seed=4)
    da, db, dc = _digest(a.parent), _digest(b.parent), _digest(c.parent)
    assert len(da) == 16 and da == db
    assert a.parent.name == b.parent.name != c.parent.name
    assert sum(da[k] != dc[k] for k in da) >= 12


def test_existing_dataset_is_reused(tiny_shapes: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(shapes, "_write_one", lambda *a: pytest.fail("regenerated"))
    assert shapes.ensure_shapes_dataset(tiny_shapes.parent.parent, n_train=8, n_val=4, imgsz=64) == tiny_shapes


def test_env_var_sets_default_root(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("LIBREYOLO_DATASETS_DIR", str(tmp_path / "envroot"))
    y = shapes.ensure_shapes_dataset(n_train=2, n_val=1, imgsz=32)
    assert y.parent.parent == tmp_path / "envroot" and y.is_file()


@pytest.mark.parametrize("cls", range(6))
def test_boxes_tight_around_drawn_pixels(cls: int) -> None:
    for seed in range(3):
        h, w = 96, 120
        bg = shapes._background(np.random.default_rng(seed), h, w)
        img, labels = shapes.render_scene(np.random.default_rng(seed), height=h, width=w, classes=[cls])
        assert labels.shape == (1, 5) and int(labels[0, 0]) == cls
        changed = np.abs(img.astype(int) - bg.astype(int)).sum(-1) > 30
        ys, xs = np.nonzero(changed)
        drawn = [xs.min(), ys.min(), xs.max() + 1, ys.max() + 1]
        np.testing.assert_array_equal(drawn, labels[0, 1:])


def test_scene_object_count_and_overlap() -> None:
    for seed in range(20):
        img, labels = shapes.render_scene(np.random.default_rng(seed), height=128, width=160)
        assert img.shape == (128, 160, 3) and img.dtype == np.uint8
        assert 1 <= len(labels) <= 8
        boxes = labels[:, 1:]
        assert (boxes[:, 0] >= 0).all() and (boxes[:, 2] <= 160).all() and (boxes[:, 3] <= 128).all()
        for i in range(len(boxes)):
            assert shapes._overlap(boxes[i], [boxes[j] for j in range(len(boxes)) if j != i]) <= 0.15 + 1e-9


def test_interrupted_generation_leaves_no_dataset(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    calls = {"n": 0}
    real = shapes._write_one

    def flaky(*args):
        calls["n"] += 1
        if calls["n"] == 5:
            raise KeyboardInterrupt
        real(*args)

    monkeypatch.setattr(shapes, "_write_one", flaky)
    with pytest.raises(KeyboardInterrupt):
        shapes.ensure_shapes_dataset(tmp_path, n_train=6, n_val=2, imgsz=32)
    assert list(tmp_path.iterdir()) == []  # neither a final folder nor a temporary one
    monkeypatch.setattr(shapes, "_write_one", real)
    y = shapes.ensure_shapes_dataset(tmp_path, n_train=6, n_val=2, imgsz=32)
    assert len(load_data_config(y).train) == 6
    assert [p.name for p in tmp_path.iterdir()] == [y.parent.name]


def test_sample_image(tmp_path: Path) -> None:
    out = tmp_path / "s.jpg"
    labels = shapes.write_sample(out)
    img = cv2.imread(str(out))
    assert img.shape == (480, 640, 3) and out.stat().st_size < 150_000
    assert sorted({int(c) for c in labels[:, 0]}) == list(range(6))
    again = tmp_path / "t.jpg"
    shapes.write_sample(again)
    assert again.read_bytes() == out.read_bytes()


def test_bundled_sample_matches_generator(tmp_path: Path) -> None:
    from libreyolo.assets import SAMPLE_IMAGE

    out = tmp_path / "s.jpg"
    shapes.write_sample(out)
    bundled, fresh = cv2.imread(SAMPLE_IMAGE), cv2.imread(str(out))
    assert bundled.shape == fresh.shape == (480, 640, 3)
    # same scene; JPEG bytes may differ between libjpeg builds, pixels barely
    assert np.abs(bundled.astype(int) - fresh.astype(int)).mean() < 1.0


def test_stale_tmp_removed_fresh_tmp_kept(tmp_path: Path) -> None:
    import os

    name = f"shapes-{shapes._params_hash(2, 1, 32, 0)}"
    # stale: untouched for hours (even if its pid is alive: reused), or its process is gone;
    # fresh: a live process (our parent) generating right now
    stale, fresh = tmp_path / f".{name}.tmp-{os.getppid()}-aaaa", tmp_path / f".{name}.tmp-{os.getppid()}-bbbb"
    dead = tmp_path / f".{name}.tmp-999999999-cccc"
    for d in (stale, fresh, dead):
        (d / "images").mkdir(parents=True)
    os.utime(stale, (1.0, 1.0))
    y = shapes.ensure_shapes_dataset(tmp_path, n_train=2, n_val=1, imgsz=32)
    assert y.parent.name == name and not stale.exists() and not dead.exists() and fresh.exists()


def test_unwritable_root_is_dataset_error(tmp_path: Path) -> None:
    from libreyolo.errors import ConfigError, DatasetError

    blocker = tmp_path / "file"
    blocker.write_text("x")
    with pytest.raises(DatasetError, match="LIBREYOLO_DATASETS_DIR"):
        shapes.ensure_shapes_dataset(blocker / "sub", n_train=2, n_val=1, imgsz=32)
    with pytest.raises(ConfigError, match="n_train"):
        shapes.ensure_shapes_dataset(tmp_path, n_train=0)
