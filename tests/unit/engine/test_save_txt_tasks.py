"""``save_txt`` per task: segment results write the segment label format (a polygon per mask, read
back by the segment dataset's parser), results without a label format are refused with what to
use instead, and ``predict(save_txt=True)`` on a restore model refuses before writing anything."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest
import torch

from libreyolo.data.segment import parse_polygon_file
from libreyolo.engine.results import Results
from libreyolo.engine.saving import ResultWriter
from libreyolo.errors import ConfigError

pytest.importorskip("cv2")  # Masks.xy traces contours with OpenCV


def _segment_result() -> Results:
    masks = torch.zeros(2, 64, 128, dtype=torch.bool)
    masks[0, 16:48, 32:64] = True  # a 32 x 32 square
    masks[1, 8:24, 96:120] = True
    boxes = torch.tensor([[32, 16, 64, 48, 0.9, 1], [96, 8, 120, 24, 0.6, 0]])
    return Results(orig_img=np.zeros((64, 128, 3), np.uint8), path="seg.jpg", names={0: "a", 1: "b"},
                   boxes=boxes, masks=masks)


def test_segment_save_txt_writes_polygons_the_segment_reader_reads_back(tmp_path: Path):
    r = _segment_result()
    f = r.save_txt(tmp_path / "seg.txt")
    rows = parse_polygon_file(f, nc=2)
    assert [c for c, _ in rows] == [1, 0]
    square = rows[0][1] * np.array([128, 64])  # back to pixels
    assert square.shape[0] >= 4
    assert square[:, 0].min() == pytest.approx(32, abs=1) and square[:, 0].max() == pytest.approx(63, abs=1)
    assert square[:, 1].min() == pytest.approx(16, abs=1) and square[:, 1].max() == pytest.approx(47, abs=1)
    line = f.read_text().splitlines()[0].split()
    assert len(line) % 2 == 1  # cls + x, y pairs: no box fields left in
    with_conf = r.save_txt(tmp_path / "conf.txt", save_conf=True).read_text().splitlines()
    assert [float(ln.split()[-1]) for ln in with_conf] == pytest.approx([0.9, 0.6])


def test_empty_mask_writes_no_line(tmp_path: Path):
    r = _segment_result()
    r.masks._data[1] = False
    assert [c for c, _ in parse_polygon_file(r.save_txt(tmp_path / "x.txt"), nc=2)] == [1]


def test_a_result_without_a_label_format_is_refused(tmp_path: Path):
    r = Results(orig_img=np.zeros((16, 16, 3), np.uint8), path="lr.png", names={0: "image"},
                restored=torch.zeros(3, 32, 32))
    with pytest.raises(ConfigError, match="no label-line format for a restored result.*save\\(\\)"):
        r.save_txt(tmp_path / "lr.txt")
    assert not (tmp_path / "lr.txt").exists()


def test_writer_refuses_save_txt_for_the_restore_task(tmp_path: Path):
    with pytest.raises(ConfigError, match="no label format for the restore task: .*save=True"):
        ResultWriter(task="restore", source="x.png", save_txt=True, save_dir=tmp_path / "run")
    assert not (tmp_path / "run").exists()
    ResultWriter(task="restore", source="x.png", save=True, save_dir=tmp_path / "run")  # save alone is fine
