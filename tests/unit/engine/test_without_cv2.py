"""Without OpenCV (libreyolo/_cv.py): images decode, predictions draw and save through Pillow;
training data and video say in one line what to install."""

from __future__ import annotations

import sys

import numpy as np
import pytest

from libreyolo.errors import MissingDependencyError


@pytest.fixture
def no_cv2(monkeypatch):
    monkeypatch.setitem(sys.modules, "cv2", None)  # `import cv2` now raises ImportError
    from libreyolo._cv import have_cv2

    assert not have_cv2()


def test_predict_plot_save_and_crops_work_without_opencv(no_cv2, tmp_path):
    from libreyolo import SAMPLE_IMAGE, LibreYOLO

    model = LibreYOLO("LibreYOLO9t.pt")
    (r,) = model.predict(str(SAMPLE_IMAGE), conf=0.25, save_crop=True, save_dir=tmp_path / "run")
    assert len(r) > 0  # the bundled demo model finds the shapes of the sample scene
    drawn = r.plot()
    assert drawn.shape == r.orig_img.shape and drawn.dtype == np.uint8
    assert (drawn != r.orig_img).any()  # boxes were drawn
    out = r.save(tmp_path / "out.png")
    from PIL import Image

    back = np.asarray(Image.open(out))[:, :, ::-1]  # PNG is lossless: exactly the drawn BGR pixels
    assert np.array_equal(back, drawn)
    assert any((tmp_path / "run" / "crops").rglob("*.jpg"))


def test_decode_without_opencv_matches_opencv(tmp_path, monkeypatch):
    from PIL import Image

    from libreyolo.engine.sources import read_image

    rgb = np.random.default_rng(0).integers(0, 256, (23, 31, 3), dtype=np.uint8)
    path = tmp_path / "x.png"
    Image.fromarray(rgb).save(path)
    with_cv = read_image(path)
    monkeypatch.setitem(sys.modules, "cv2", None)
    without = read_image(path)
    assert np.array_equal(with_cv, rgb) and np.array_equal(without, rgb)


def test_training_data_and_video_name_what_to_install(no_cv2, tmp_path):
    from libreyolo._cv import cv2 as lazy
    from libreyolo.engine import video

    with pytest.raises(MissingDependencyError, match=r"training data .* needs OpenCV.*libreyolo\[cv\]"):
        lazy.imread("x.jpg")
    with pytest.raises(MissingDependencyError, match="video needs OpenCV"):
        video.open_capture(str(tmp_path / "clip.mp4"))


def test_classifier_predicts_without_opencv(no_cv2):
    from libreyolo import LibreYOLO

    model = LibreYOLO("LibreResNet18-cls.pt", pretrained=False, nc=4)
    img = np.random.default_rng(0).integers(0, 256, (90, 120, 3), dtype=np.uint8)
    (r,) = model.predict(img, imgsz=64)
    assert r.probs is not None and r.probs.top1 in range(4)
    assert r.plot().shape == img.shape
