"""Results.semantic: validation, the overlay plot, save(), save_mask(), summary / JSON / CSV, copies."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest
import torch

from libreyolo._cv import cv2
from libreyolo.engine.results import Results
from libreyolo.engine.semantic_io import palette
from libreyolo.errors import ConfigError

NAMES = {0: "background", 1: "circle", 2: "square"}


def _result() -> Results:
    sem = torch.zeros(8, 10, dtype=torch.int64)
    sem[:, 6:] = 2
    sem[0, 0] = 1
    return Results(orig_img=np.full((8, 10, 3), 200, np.uint8), path="scene.jpg", names=NAMES, semantic=sem)


def test_plot_blends_the_class_colours_and_save_writes_it(tmp_path: Path) -> None:
    r = _result()
    img = r.plot()
    bgr = palette(3)[:, ::-1].astype(np.float32)
    want = np.clip(200 * 0.5 + bgr[2] * 0.5 + 0.5, 0, 255).astype(np.uint8)
    assert img.shape == (8, 10, 3) and np.array_equal(img[3, 8], want) and not np.array_equal(img[3, 8], img[3, 2])
    assert np.array_equal(r.orig_img, np.full((8, 10, 3), 200, np.uint8))  # a new array
    out = r.save(tmp_path / "overlay.png")
    assert out.is_file() and np.array_equal(cv2.imread(str(out)), img)


def test_save_mask_roundtrips_the_class_ids(tmp_path: Path) -> None:
    r = _result()
    f = r.save_mask(tmp_path / "m" / "scene.png")
    back = cv2.imread(str(f), cv2.IMREAD_UNCHANGED)
    assert back.dtype == np.uint8 and np.array_equal(back, r.semantic.numpy())
    with pytest.raises(ConfigError, match="PNG"):
        r.save_mask(tmp_path / "scene.jpg")


def test_summary_verbose_json_csv_and_copies() -> None:
    r = _result()
    rows = r.summary()
    assert [(d["name"], d["pixels"]) for d in rows] == [("background", 47), ("square", 32), ("circle", 1)]
    assert rows[0]["fraction"] == pytest.approx(47 / 80)
    assert r.verbose() == "background 59%, square 40%, circle 1%" and "semantic map" in repr(r)
    assert json.loads(r.to_json())[1]["class"] == 2
    assert r.to_csv().splitlines()[:2] == ["name,class,pixels,fraction", "background,0,47,0.5875"]
    n = r.numpy()
    assert isinstance(n.semantic, np.ndarray) and np.array_equal(n.semantic, r.semantic.numpy())
    assert n.plot().shape == (8, 10, 3) and torch.equal(r.cpu().semantic, r.semantic)
    assert r.new().semantic is None and len(r) == 0


def test_a_map_of_the_wrong_shape_or_type_is_refused() -> None:
    img = np.zeros((8, 10, 3), np.uint8)
    with pytest.raises(ConfigError, match="does not match the image"):
        Results(orig_img=img, names=NAMES, semantic=torch.zeros(8, 9, dtype=torch.int64))
    with pytest.raises(ConfigError, match="integer Tensor"):
        Results(orig_img=img, names=NAMES, semantic=torch.zeros(8, 10))
