"""Results / Boxes API on hand-made detections (libreyolo.engine.results, plotting)."""

from __future__ import annotations

import json
from pathlib import Path

import cv2
import numpy as np
import pytest
import torch

from libreyolo.engine.plotting import class_color, class_color_bgr
from libreyolo.engine.results import Boxes, Results, next_run_dir
from libreyolo.errors import ConfigError

NAMES = {0: "circle", 1: "square", 2: "bus"}
H, W = 100, 200


def _boxes() -> torch.Tensor:
    return torch.tensor(
        [
            [10.0, 20.0, 50.0, 60.0, 0.90, 0.0],
            [100.0, 10.0, 180.0, 90.0, 0.75, 1.0],
            [60.0, 30.0, 90.0, 70.0, 0.50, 0.0],
        ]
    )


def _result(boxes: torch.Tensor | None = None, **kw) -> Results:
    img = np.full((H, W, 3), 128, np.uint8)
    args = {"orig_img": img, "path": "/data/pics/street.png", "names": NAMES,
            "boxes": _boxes() if boxes is None else boxes,
            "speed": {"preprocess": 1.0, "inference": 2.0, "postprocess": 0.5}, "frame": None}
    args.update(kw)
    return Results(**args)


def test_box_properties_and_math() -> None:
    r = _result()
    b = r.boxes
    assert len(r) == len(b) == 3 and r.orig_shape == (H, W)
    torch.testing.assert_close(b.xyxy, _boxes()[:, :4])
    torch.testing.assert_close(b.conf, torch.tensor([0.90, 0.75, 0.50]))
    torch.testing.assert_close(b.cls, torch.tensor([0.0, 1.0, 0.0]))
    torch.testing.assert_close(b.xywh[0], torch.tensor([30.0, 40.0, 40.0, 40.0]))
    torch.testing.assert_close(b.xyxyn[1], torch.tensor([100 / W, 10 / H, 180 / W, 90 / H]))
    torch.testing.assert_close(b.xywhn[0], torch.tensor([30 / W, 40 / H, 40 / W, 40 / H]))
    torch.testing.assert_close(b.data, _boxes())


def test_box_indexing_iteration_and_numpy() -> None:
    b = _result().boxes
    first = b[0]
    assert isinstance(first, Boxes) and first.xyxy.shape == (1, 4)
    torch.testing.assert_close(b[-1].conf, torch.tensor([0.50]))
    kept = b[b.conf > 0.6]
    assert len(kept) == 2
    assert [float(x.conf) for x in b] == pytest.approx([0.9, 0.75, 0.5])
    with pytest.raises(IndexError):
        b[3]
    n = b.numpy()
    assert isinstance(n.xyxy, np.ndarray) and isinstance(n.xywhn, np.ndarray)
    np.testing.assert_allclose(n.xywh[0], [30.0, 40.0, 40.0, 40.0])
    assert isinstance(b.cpu().xyxy, torch.Tensor)
    filtered = _result()[_result().boxes.cls == 0]
    assert isinstance(filtered, Results) and len(filtered) == 2


def test_boxes_accept_numpy_and_single_row_and_reject_bad_shapes() -> None:
    b = Boxes(np.array([1, 2, 3, 4, 0.5, 2], np.float32), (10, 10))
    assert b.xyxy.shape == (1, 4) and isinstance(b.xyxy, np.ndarray)
    with pytest.raises(ConfigError, match=r"\(N, 6\)"):
        Boxes(torch.zeros(3, 4), (10, 10))
    with pytest.raises(ConfigError, match="BGR uint8 array of shape"):
        Results(orig_img=np.zeros((4, 4), np.uint8), names=NAMES, boxes=torch.zeros(0, 6))


def test_empty_results() -> None:
    r = _result(torch.zeros(0, 6))
    assert len(r) == 0 and r.verbose() == "no detections" and json.loads(r.to_json()) == []
    assert r.boxes.xywh.shape == (0, 4) and r.boxes.xyxyn.shape == (0, 4)
    np.testing.assert_array_equal(r.plot(), r.orig_img)
    assert r.plot() is not r.orig_img


def test_verbose_summary_and_repr() -> None:
    r = _result()
    assert r.verbose() == "2 circles, 1 square"
    r2 = _result(torch.tensor([[0, 0, 5, 5, 0.4, 2.0], [1, 1, 6, 6, 0.3, 2.0]]))
    assert r2.verbose() == "2 buses"
    text = repr(r)
    assert "street.png" in text and "2 circles, 1 square" in text and "(100, 200)" in text
    s = r.summary()
    assert s[1] == {"name": "square", "class": 1, "confidence": 0.75,
                    "box": {"x1": 100.0, "y1": 10.0, "x2": 180.0, "y2": 90.0}}
    sn = r.summary(normalize=True)
    assert sn[1]["box"] == {"x1": 0.5, "y1": 0.1, "x2": 0.9, "y2": 0.9}


def test_to_json_round_trips() -> None:
    r = _result()
    data = json.loads(r.to_json())
    assert data == r.summary()
    assert [d["name"] for d in data] == ["circle", "square", "circle"]
    assert data[0]["box"]["x2"] == pytest.approx(50.0)
    assert data[0]["confidence"] == pytest.approx(0.9)


def test_plot_draws_box_outlines_in_class_colours() -> None:
    r = _result()
    img = r.plot(line_width=2, labels=False)
    assert img.shape == (H, W, 3) and img.dtype == np.uint8
    assert (r.orig_img == 128).all()  # original untouched
    # left edge of box 0 (x = 10, y from 20 to 60) now has the class-0 colour, in BGR order
    np.testing.assert_array_equal(img[40, 10], class_color_bgr(0))
    np.testing.assert_array_equal(img[50, 100], class_color_bgr(1))  # left edge of box 1 (class 1)
    assert class_color(0) != class_color(1) and class_color_bgr(0) == class_color(0)[::-1]
    # inside the box, away from the outline, pixels are unchanged
    np.testing.assert_array_equal(img[40, 30], [128, 128, 128])
    # labels add pixels that the outline alone does not
    labelled = r.plot(line_width=2)
    assert (labelled != img).any()
    assert (r.plot(line_width=2, conf=False) != labelled).any()


def test_plot_and_orig_img_are_bgr_so_cv2_keeps_true_colours(tmp_path: Path) -> None:
    """A red image (BGR (0, 0, 255)) with a box: cv2.imwrite(r.plot()) is still red when read as RGB."""
    from PIL import Image

    red_bgr = np.zeros((H, W, 3), np.uint8)
    red_bgr[..., 2] = 255
    r = Results(orig_img=red_bgr, names=NAMES, boxes=torch.tensor([[10.0, 20.0, 50.0, 60.0, 0.9, 1.0]]))
    plotted = r.plot(line_width=2, labels=False)
    np.testing.assert_array_equal(plotted[80, 150], [0, 0, 255])  # background untouched, still BGR
    np.testing.assert_array_equal(plotted[40, 10], class_color_bgr(1))
    assert cv2.imwrite(str(tmp_path / "cv.png"), plotted)
    rgb = np.asarray(Image.open(tmp_path / "cv.png").convert("RGB"))
    np.testing.assert_array_equal(rgb[80, 150], [255, 0, 0])  # red, not blue
    np.testing.assert_array_equal(rgb[40, 10], class_color(1))  # the class colour, not its mirror
    saved = np.asarray(Image.open(r.save(tmp_path / "saved.png", labels=False, line_width=2)).convert("RGB"))
    np.testing.assert_array_equal(saved, rgb)  # save() writes the same true colours


@pytest.mark.parametrize("high_first", [True, False])
def test_more_confident_label_is_drawn_on_top(high_first: bool) -> None:
    """Two detections of different classes on the same box: the label you can read is the confident one."""
    low = [40.0, 40.0, 120.0, 90.0, 0.30, 0.0]
    high = [40.0, 40.0, 120.0, 90.0, 0.95, 1.0]
    rows = [high, low] if high_first else [low, high]
    r = Results(orig_img=np.zeros((H, W, 3), np.uint8), names=NAMES, boxes=torch.tensor(rows))
    img = r.plot(line_width=2)
    # the label background sits just above the box's top-left corner; its colour is the winner's
    np.testing.assert_array_equal(img[38, 41], class_color_bgr(1))
    np.testing.assert_array_equal(img[40, 80], class_color_bgr(1))  # and so is the shared top edge


def test_save_to_directory_and_file(tmp_path: Path) -> None:
    r = _result()
    out = r.save(tmp_path / "run")
    assert out == tmp_path / "run" / "street.png" and r.save_path == out
    np.testing.assert_array_equal(cv2.imread(str(out)), r.plot())  # PNG is lossless; both BGR
    jpg = r.save(tmp_path / "x" / "annotated.jpg")
    img = cv2.imread(str(jpg))
    assert img is not None and img.shape == (H, W, 3)
    with pytest.raises(ConfigError, match="'.gif' is not a format"):
        r.save(tmp_path / "out.gif")
    dotted = r.save(tmp_path / "exp.1")  # a dot in a folder name still means a folder
    assert dotted == tmp_path / "exp.1" / "street.png" and dotted.is_file()


def test_save_names_frames_and_in_memory_images_without_overwriting(tmp_path: Path) -> None:
    frame = _result(path="/videos/clip.mp4", frame=12).save(tmp_path)
    assert frame.name == "clip_000012.jpg"
    a = _result(path=None).save(tmp_path)
    b = _result(path=None).save(tmp_path)
    assert (a.name, b.name) == ("image0.jpg", "image1.jpg") and a.exists() and b.exists()


def test_next_run_dir_increments(tmp_path: Path) -> None:
    base = tmp_path / "runs" / "detect" / "predict"
    first, second, third = (next_run_dir(base) for _ in range(3))
    assert (first.name, second.name, third.name) == ("predict", "predict2", "predict3")
    assert all(p.is_dir() for p in (first, second, third))
