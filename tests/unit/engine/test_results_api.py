"""Results API parity: cpu/numpy/to, new, update, track ids, to_df/to_csv (pandas optional),
save() default name, save_txt, save_crop, ids drawn by plot()."""

from __future__ import annotations

import sys
import types
from pathlib import Path

import cv2
import numpy as np
import pytest
import torch

from libreyolo.engine.plotting import class_color_bgr
from libreyolo.engine.results import Boxes, Results
from libreyolo.errors import ConfigError

NAMES = {0: "circle", 1: "square"}
H, W = 100, 200
ROWS = torch.tensor([[10.0, 20.0, 50.0, 60.0, 0.9, 0.0], [100.0, 10.0, 180.0, 90.0, 0.75, 1.0]])


def _img() -> np.ndarray:
    img = np.zeros((H, W, 3), np.uint8)
    img[:, :, 0] = np.arange(W, dtype=np.uint8)[None, :]  # a gradient, so crops are checkable
    img[:, :, 1] = np.arange(H, dtype=np.uint8)[:, None]
    return img


def _result(**kw) -> Results:
    args = {"orig_img": _img(), "path": "/data/street.png", "names": NAMES, "boxes": ROWS.clone(),
            "speed": {"inference": 2.0}}
    args.update(kw)
    return Results(**args)


def test_boxes_carry_track_ids_through_indexing_and_conversions() -> None:
    seven = torch.cat([ROWS[:, :4], torch.tensor([[3.0], [8.0]]), ROWS[:, 4:]], dim=1)  # x1..y2, id, conf, cls
    b = Boxes(seven, (H, W))
    assert b.is_track and b.id.tolist() == [3, 8] and b.id.dtype == torch.int64
    torch.testing.assert_close(b.data, ROWS)  # data keeps the six detection columns
    assert b[1].id.tolist() == [8] and b[b.conf > 0.8].id.tolist() == [3]
    n = b.numpy()
    assert isinstance(n.id, np.ndarray) and n.id.tolist() == [3, 8]
    assert b.cpu().id.tolist() == [3, 8] and b.to("cpu").id.tolist() == [3, 8]
    plain = Boxes(ROWS, (H, W))
    assert not plain.is_track and plain.id is None and plain[0].id is None
    assert Boxes(ROWS, (H, W), id=np.array([5, 6])).id.tolist() == [5, 6]
    with pytest.raises(ConfigError, match="2 track ids"):
        Boxes(ROWS, (H, W), id=torch.tensor([1]))
    with pytest.raises(ConfigError, match="already carry track ids"):
        Boxes(seven, (H, W), id=torch.tensor([1, 2]))


def test_results_cpu_numpy_to_new_and_update() -> None:
    r = _result()
    n = r.numpy()
    assert isinstance(n.boxes.xyxy, np.ndarray) and isinstance(r.boxes.xyxy, torch.Tensor)  # a copy
    np.testing.assert_allclose(n.boxes.data, ROWS.numpy())
    for other in (r.cpu(), r.to("cpu"), r.to(torch.device("cpu"))):
        assert other is not r and isinstance(other.boxes.data, torch.Tensor)
        torch.testing.assert_close(other.boxes.data, ROWS)
        assert other.path == r.path and other.names == r.names and other.orig_img is r.orig_img
    probs = Results(orig_img=_img(), names=NAMES, probs=torch.tensor([0.2, 0.8]))
    assert isinstance(probs.numpy().probs.data, np.ndarray) and probs.cpu().probs.top1 == 1
    fresh = r.new()
    assert fresh.boxes is None and fresh.probs is None and len(fresh) == 0
    assert fresh.path == r.path and fresh.orig_img is r.orig_img and fresh.speed == r.speed
    tracked = Boxes(ROWS, (H, W), id=torch.tensor([4, 9]))
    assert fresh.update(boxes=tracked) is fresh and fresh.boxes is tracked
    assert fresh[1:].boxes.id.tolist() == [9]  # Results indexing keeps ids too
    with pytest.raises(ConfigError, match="refer to an image of shape"):
        fresh.update(boxes=Boxes(ROWS, (10, 10)))


def test_summary_csv_and_df_with_track_ids(monkeypatch) -> None:
    r = _result(boxes=Boxes(ROWS, (H, W), id=torch.tensor([4, 9])))
    assert [s["track_id"] for s in r.summary()] == [4, 9]
    assert "track_id" not in _result().summary()[0]
    monkeypatch.setitem(sys.modules, "pandas", None)  # pandas not installed
    lines = r.to_csv().splitlines()
    assert lines[0] == "name,class,confidence,x1,y1,x2,y2,track_id"
    assert lines[1] == "circle,0,0.9,10.0,20.0,50.0,60.0,4"
    with pytest.raises(ConfigError, match="pip install pandas"):
        r.to_df()
    none_tracked = r[r.boxes.conf > 2]  # a tracked frame with no boxes keeps the track_id column
    assert none_tracked.to_csv() == "name,class,confidence,x1,y1,x2,y2,track_id\n"


def test_to_csv_writes_a_file_and_to_df_hands_pandas_the_rows(tmp_path: Path, monkeypatch) -> None:
    r = _result()
    out = tmp_path / "csv" / "dets.csv"
    text = r.to_csv(out, normalize=True)
    assert out.read_text() == text and text.splitlines()[2] == "square,1,0.75,0.5,0.1,0.9,0.9"
    seen = {}

    def data_frame(rows, columns):
        seen.update(rows=rows, columns=columns)
        return "frame"

    monkeypatch.setitem(sys.modules, "pandas", types.SimpleNamespace(DataFrame=data_frame))
    assert r.to_df() == "frame"
    assert seen["columns"] == ["name", "class", "confidence", "x1", "y1", "x2", "y2"]
    assert seen["rows"][1] == {"name": "square", "class": 1, "confidence": 0.75,
                               "x1": 100.0, "y1": 10.0, "x2": 180.0, "y2": 90.0}
    probs = Results(orig_img=_img(), names=NAMES, probs=torch.tensor([0.2, 0.8]))
    assert probs.to_csv().splitlines() == ["name,class,confidence", "square,1,0.8", "circle,0,0.2"]


def test_save_without_target_uses_a_default_name_and_never_the_source(tmp_path: Path, monkeypatch) -> None:
    monkeypatch.chdir(tmp_path)
    src = tmp_path / "street.png"
    assert cv2.imwrite(str(src), _img())
    before = src.read_bytes()
    r = _result(path=str(src))
    out = r.save()
    assert out == tmp_path / "results_street.png" and out.is_file()
    np.testing.assert_array_equal(cv2.imread(str(out)), r.plot())
    assert _result(path=None).save().name == "results_image0.jpg"
    with pytest.raises(ConfigError, match="overwrite the source image"):
        r.save(src)
    with pytest.raises(ConfigError, match="overwrite the source image"):
        r.save(tmp_path)  # the folder of the source: the natural name is the source itself
    assert src.read_bytes() == before


def test_save_txt_writes_normalised_yolo_lines(tmp_path: Path) -> None:
    r = _result()
    f = r.save_txt(tmp_path / "labels" / "street.txt")
    assert f.read_text().splitlines() == ["0 0.15 0.4 0.2 0.4", "1 0.7 0.5 0.4 0.8"]
    assert r.save_txt(tmp_path / "c.txt", save_conf=True).read_text().splitlines()[1] == "1 0.7 0.5 0.4 0.8 0.75"
    tracked = _result(boxes=Boxes(ROWS, (H, W), id=torch.tensor([4, 9])))
    assert tracked.save_txt(tmp_path / "t.txt").read_text().splitlines()[0] == "0 0.15 0.4 0.2 0.4 4"
    assert _result(boxes=torch.zeros(0, 6)).save_txt(tmp_path / "e.txt").read_text() == ""


def test_save_crop_writes_each_box_under_its_class_name(tmp_path: Path) -> None:
    rows = torch.cat([ROWS, torch.tensor([[12.0, 22.0, 30.0, 40.0, 0.6, 0.0], [5.0, 5.0, 5.0, 9.0, 0.5, 1.0]])])
    r = _result(boxes=rows)
    files = r.save_crop(tmp_path / "crops")
    assert [f.relative_to(tmp_path / "crops").as_posix() for f in files] == [
        "circle/street.jpg", "square/street.jpg", "circle/street_2.jpg"]  # the zero-width box is left out
    cls, crop = r.crops()[0]
    assert cls == 0 and crop.shape == (40, 40, 3)
    np.testing.assert_array_equal(crop, r.orig_img[20:60, 10:50])
    read = cv2.imread(str(files[0]))
    assert read.shape == (40, 40, 3) and np.abs(read.astype(int) - crop.astype(int)).mean() < 4  # JPEG
    again = r.save_crop(tmp_path / "crops")
    assert again[0].name == "street_3.jpg"  # never overwrites an earlier crop



def test_save_crop_file_name_may_carry_an_image_suffix(tmp_path: Path) -> None:
    r = _result()
    assert [f.relative_to(tmp_path).as_posix() for f in r.save_crop(tmp_path, file_name=Path("cut.jpg"))] == [
        "circle/cut.jpg", "square/cut.jpg"]  # Ultralytics' calling style; not cut.jpg.jpg
    assert r[:1].save_crop(tmp_path, file_name="cut.PNG")[0].name == "cut_2.jpg"  # crops are always .jpg
    assert r[:1].save_crop(tmp_path, file_name="v1.2")[0].name == "v1.2.jpg"  # not an image suffix: kept

def test_plot_colours_tracked_boxes_by_id_and_labels_them() -> None:
    plain = Results(orig_img=np.zeros((H, W, 3), np.uint8), names=NAMES, boxes=ROWS.clone())
    tracked = plain.new().update(boxes=Boxes(ROWS, (H, W), id=torch.tensor([7, 11])))
    outline = tracked.plot(labels=False, line_width=2)
    np.testing.assert_array_equal(outline[40, 10], class_color_bgr(7))  # left edge of box 0: id 7's colour
    np.testing.assert_array_equal(outline[50, 100], class_color_bgr(11))
    same_colours = plain.new().update(boxes=Boxes(ROWS, (H, W), id=torch.tensor([0, 1])))
    # with ids equal to the class ids the colours match, so the only difference is the "id:" text
    np.testing.assert_array_equal(same_colours.plot(labels=False, line_width=2), plain.plot(labels=False, line_width=2))
    assert (same_colours.plot(line_width=2) != plain.plot(line_width=2)).any()
