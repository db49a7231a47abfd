"""The segment task through the public API: predict (masks at the original image size, polygons,
overlay, to_json round trip, indexing), a short train on shapes-seg and val."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest
import torch

from libreyolo import SAMPLE_IMAGE
from libreyolo.data.segment import rasterise
from libreyolo.data.shapes_seg import ensure_shapes_seg_dataset
from libreyolo.engine.results import Results
from libreyolo.model import Model
from libreyolo.registry import families, parse_weights_name


@pytest.fixture(scope="module")
def result() -> Results:
    torch.manual_seed(0)
    model = Model(families()["yolo9_seg"](size="t", nc=6))
    return model(SAMPLE_IMAGE, imgsz=64, conf=0.0, max_det=4)[0]


def test_predict_returns_one_mask_per_box_at_the_original_size(result: Results) -> None:
    assert result.orig_shape == (480, 640) and len(result.boxes) == 4
    assert result.masks.data.shape == (4, 480, 640) and result.masks.data.dtype == torch.bool
    assert len(result.masks.xy) == 4 and all(p.ndim == 2 and p.shape[1] == 2 for p in result.masks.xy)
    sub = result[torch.tensor([True, True, False, False])]
    assert len(sub.boxes) == len(sub.masks) == 2 and torch.equal(sub.masks.data, result.masks.data[:2])


def test_to_json_round_trip_gives_back_boxes_and_masks() -> None:
    h, w = 60, 80
    masks = torch.zeros(2, h, w, dtype=torch.bool)
    masks[0, 10:30, 5:40] = True
    yy, xx = torch.meshgrid(torch.arange(h), torch.arange(w), indexing="ij")
    masks[1] = (yy - 40) ** 2 + (xx - 60) ** 2 <= 12 ** 2
    boxes = torch.tensor([[5.0, 10.0, 40.0, 30.0, 0.9, 1.0], [48.0, 28.0, 73.0, 53.0, 0.6, 0.0]])
    r = Results(orig_img=np.zeros((h, w, 3), np.uint8), names={0: "circle", 1: "square"}, boxes=boxes, masks=masks)
    rows = json.loads(r.to_json())
    assert [row["name"] for row in rows] == ["square", "circle"]
    assert [list(row["box"].values()) for row in rows] == boxes[:, :4].tolist()
    for row, m in zip(rows, masks, strict=True):
        poly = np.stack([row["segments"]["x"], row["segments"]["y"]], 1)
        back = torch.from_numpy(rasterise([poly], max(h, w))[0][:h, :w].astype(bool))
        assert int((back ^ m).sum()) == 0  # the traced outline fills back to the same pixels
    assert r.to_csv().splitlines()[0] == "name,class,confidence,x1,y1,x2,y2"  # polygons only in to_json
    norm = json.loads(r.to_json(normalize=True))
    assert max(norm[0]["segments"]["x"]) <= 1.0 and abs(norm[0]["segments"]["x"][0] * w - rows[0]["segments"]["x"][0]) < 1e-3


def test_plot_and_save_draw_the_mask_overlay(result: Results, tmp_path: Path) -> None:
    with_masks = result.plot(labels=False)
    boxes_only = Results(orig_img=result.orig_img, names=result.names, boxes=result.boxes.data).plot(labels=False)
    inside = result.masks.data.any(0).numpy()
    assert inside.any() and bool((with_masks[inside] != boxes_only[inside]).any())
    assert result.save(tmp_path / "out.png").is_file()


def test_masks_that_do_not_fit_the_image_are_refused() -> None:
    from libreyolo.errors import ConfigError

    with pytest.raises(ConfigError, match="do not match the image"):
        Results(orig_img=np.zeros((8, 8, 3), np.uint8), names={0: "a"}, masks=torch.zeros(1, 4, 4))


def test_weights_name_and_short_train_then_val(tmp_path: Path) -> None:
    parsed = parse_weights_name("LibreYOLO9segt-seg.pt")
    assert (parsed.family, parsed.size, parsed.task) == ("yolo9_seg", "t", "segment")
    data = ensure_shapes_seg_dataset(tmp_path / "ds", n_train=4, n_val=2, imgsz=96)
    torch.manual_seed(0)
    model = Model(families()["yolo9_seg"](size="t", nc=6))
    out = model.train(data=str(data), epochs=1, imgsz=64, batch=4, workers=0, device="cpu", lr0=1e-3,
                      project=str(tmp_path / "runs"), verbose=False, tensorboard=False, plots=False)
    for key in ("mAP50-95", "mask_mAP50-95", "mask_mAP50", "fitness"):
        assert 0.0 <= out[key] <= 1.0, key
    assert out["best"] and Path(out["best"]).is_file()
    header = (Path(out["best"]).parents[1] / "results.csv").read_text().splitlines()[0].split(",")
    assert {"train/seg_loss", "val/seg_loss", "metrics/mask_mAP50-95"} <= set(header)
    m = model.val(data=str(data), imgsz=64, batch=4, workers=0, verbose=False, plots=False)
    assert m["images"] == 2 and m["instances"] > 0 and "mask_mAP50-95" in m
    from libreyolo import LibreYOLO

    loaded = LibreYOLO(out["best"])
    assert loaded.task == "segment" and loaded.FAMILY == "yolo9_seg"
    r = loaded(SAMPLE_IMAGE, imgsz=64, conf=0.0, max_det=2)[0]
    assert r.masks.data.shape == (2, 480, 640)
