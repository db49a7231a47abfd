"""The pose task through the public API: predict (keypoints in original pixels, plot with the
skeleton, summary / to_json, indexing, save_txt in the pose label format), a short train on
shapes-pose (the head rebuilt for its kpt_shape), val, and the saved checkpoint."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest
import torch

from libreyolo import SAMPLE_IMAGE
from libreyolo.data.pose import parse_pose_file
from libreyolo.data.shapes_pose import ensure_shapes_pose_dataset
from libreyolo.engine.keypoints import Keypoints
from libreyolo.engine.results import Results
from libreyolo.errors import ConfigError
from libreyolo.model import Model
from libreyolo.registry import families, parse_weights_name


@pytest.fixture(scope="module")
def result() -> Results:
    torch.manual_seed(0)
    model = Model(families()["yolo9_pose"](size="t", nc=2))
    return model(SAMPLE_IMAGE, imgsz=64, conf=0.0, max_det=4)[0]


def test_predict_gives_keypoints_per_box_in_original_pixels(result: Results) -> None:
    assert result.orig_shape == (480, 640) and len(result.boxes) == 4
    k = result.keypoints
    assert isinstance(k, Keypoints) and k.shape == (4, 17, 3) and k.data.dtype == torch.float32
    assert bool((k.xy[..., 0] >= 0).all() and (k.xy[..., 0] <= 640).all() and (k.xy[..., 1] <= 480).all())
    assert bool(((k.conf >= 0) & (k.conf <= 1)).all()) and torch.allclose(k.xyn * torch.tensor([640, 480]), k.xy)
    sub = result[torch.tensor([True, False, True, False])]
    assert len(sub.boxes) == len(sub.keypoints) == 2 and torch.equal(sub.keypoints.data, k.data[[0, 2]])


def _hand_made() -> Results:
    h, w = 60, 80
    kp = torch.tensor([[[10.0, 10.0, 0.9], [40.0, 10.0, 0.8], [40.0, 40.0, 0.1]]])
    return Results(orig_img=np.zeros((h, w, 3), np.uint8), names={0: "square"},
                   boxes=torch.tensor([[10.0, 10.0, 40.0, 40.0, 0.9, 0.0]]),
                   keypoints={"data": kp, "skeleton": [[0, 1], [1, 2]]})


def test_plot_draws_points_and_the_skeleton_between_visible_keypoints() -> None:
    r = _hand_made()
    with_k = r.plot(labels=False, line_width=1)
    boxes_only = Results(orig_img=r.orig_img, names=r.names, boxes=r.boxes.data).plot(labels=False, line_width=1)
    diff = (with_k != boxes_only).any(2)
    assert diff[10, 25] and diff[10, 40]  # the skeleton line 0-1 and keypoint 1
    assert not diff[25, 40] and not diff[40, 40]  # 1-2 is not drawn: keypoint 2 scores below 0.5
    no_skel = Results(orig_img=r.orig_img, names=r.names, boxes=r.boxes.data, keypoints=r.keypoints.data)
    assert not (no_skel.plot(labels=False, line_width=1) != boxes_only).any(2)[10, 25]


def test_summary_json_and_save_txt_in_the_pose_label_format(tmp_path: Path) -> None:
    r = _hand_made()
    row = json.loads(r.to_json())[0]
    assert row["keypoints"] == {"x": [10.0, 40.0, 40.0], "y": [10.0, 10.0, 40.0], "visible": [0.9, 0.8, 0.1]}
    assert r.to_csv().splitlines()[0] == "name,class,confidence,x1,y1,x2,y2"  # keypoints only in to_json
    f = r.save_txt(tmp_path / "a.txt")
    cls, boxes, kpts = parse_pose_file(f, nc=1, kpt_shape=(3, 3))  # what save_txt writes reads back as labels
    assert cls.tolist() == [0] and np.allclose(boxes[0], [25 / 80, 25 / 60, 30 / 80, 30 / 60], atol=1e-5)
    assert np.allclose(kpts[0], [[10 / 80, 10 / 60, 2], [0.5, 10 / 60, 2], [0, 0, 0]], atol=1e-5)


def test_bad_keypoints_are_refused() -> None:
    with pytest.raises(ConfigError, match=r"Tensor\[N, K, 3\]"):
        Results(orig_img=np.zeros((8, 8, 3), np.uint8), names={0: "a"}, keypoints=torch.zeros(4, 3))
    with pytest.raises(ConfigError, match="skeleton"):
        Keypoints(torch.zeros(1, 2, 3), (8, 8), skeleton=[[0, 2]])


def test_weights_name_and_short_train_then_val(tmp_path: Path) -> None:
    parsed = parse_weights_name("LibreYOLO9poset-pose.pt")
    assert (parsed.family, parsed.size, parsed.task) == ("yolo9_pose", "t", "pose")
    data = ensure_shapes_pose_dataset(tmp_path / "ds", n_train=4, n_val=2, imgsz=96)
    torch.manual_seed(0)
    model = Model(families()["yolo9_pose"](size="t", nc=2))
    out = model.train(data=str(data), epochs=1, imgsz=64, batch=4, workers=0, device="cpu", lr0=1e-3,
                      project=str(tmp_path / "runs"), verbose=False, tensorboard=False, plots=False)
    assert model.nkpt == 5 and model.names == {0: "square", 1: "triangle"}  # rebuilt for kpt_shape [5, 3]
    for key in ("mAP50-95", "kpt_mAP50-95", "kpt_mAP50", "fitness"):
        assert 0.0 <= out[key] <= 1.0, key
    header = (Path(out["best"]).parents[1] / "results.csv").read_text().splitlines()[0].split(",")
    assert {"train/pose_loss", "train/kobj_loss", "val/pose_loss", "metrics/kpt_mAP50-95"} <= set(header)
    m = model.val(data=str(data), imgsz=64, batch=4, workers=0, verbose=False, plots=False)
    assert m["images"] == 2 and m["instances"] > 0 and "kpt_mAP50-95" in m
    from libreyolo import LibreYOLO

    loaded = LibreYOLO(out["best"])
    assert loaded.task == "pose" and loaded.FAMILY == "yolo9_pose" and loaded.nkpt == 5
    r = loaded(SAMPLE_IMAGE, imgsz=64, conf=0.0, max_det=2)[0]
    assert r.keypoints.shape == (2, 5, 3) and r.keypoints.skeleton == [[0, 1], [1, 2], [2, 3], [3, 0], [2, 4], [3, 4]]


def test_val_refuses_data_of_another_keypoint_count(tmp_path: Path) -> None:
    data = ensure_shapes_pose_dataset(tmp_path / "ds", n_train=1, n_val=1, imgsz=64)
    model = Model(families()["yolo9_pose"](size="t", nc=2))  # 17 keypoints; the data has 5
    with pytest.raises(ConfigError, match="predicts 17 keypoints per object but the data has 5"):
        model.val(data=str(data), imgsz=64, batch=1, workers=0, verbose=False, plots=False)


def test_exported_model_keeps_the_keypoint_count(tmp_path: Path) -> None:
    from libreyolo import LibreYOLO

    torch.manual_seed(0)
    model = Model(families()["yolo9_pose"](size="t", nc=2))
    model.set_arch(nkpt=5)
    path = model.export(format="onnx", imgsz=64, file=str(tmp_path / "pose.onnx"))
    loaded = LibreYOLO(str(path))
    img = np.random.default_rng(0).integers(0, 255, (48, 80, 3), dtype=np.uint8)
    (ox,) = loaded.predict(img, imgsz=64, conf=0.0, max_det=3)
    (pt,) = model.predict(img, imgsz=64, conf=0.0, max_det=3)
    assert ox.keypoints.shape == pt.keypoints.shape == (3, 5, 3)
    assert torch.allclose(ox.keypoints.data, pt.keypoints.data, atol=1e-2)
