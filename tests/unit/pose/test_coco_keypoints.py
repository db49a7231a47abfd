"""COCO person-keypoints JSON as pose labels: read with the boxes, normalised as a YOLO pose label
file would be, with one-line errors for wrong keypoint counts and visibilities, and a pose
dataset built from a JSON yields the same items as one built from the equivalent label files."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest
import torch
from PIL import Image

from libreyolo.data.coco import read_coco
from libreyolo.data.pose import PoseDataset, load_pose_data
from libreyolo.errors import DatasetError

K = 3


def _write(root: Path, anns: list[dict], *, names: list[str] | None = None) -> Path:
    (root / "images" / "train").mkdir(parents=True, exist_ok=True)
    (root / "images" / "val").mkdir(parents=True, exist_ok=True)
    rng = np.random.default_rng(0)
    for split in ("train", "val"):
        Image.fromarray(rng.integers(0, 256, (60, 80, 3), dtype=np.uint8)).save(root / "images" / split / "a.png")
    (root / "ann").mkdir(exist_ok=True)
    cat = {"id": 1, "name": "person"} | ({"keypoints": names} if names is not None else {})
    for split in ("train", "val"):
        doc = {"images": [{"id": 1, "file_name": "a.png", "width": 80, "height": 60}], "categories": [cat],
               "annotations": anns}
        (root / "ann" / f"{split}.json").write_text(json.dumps(doc))
    yaml = root / "data.yaml"
    yaml.write_text(f"path: {root}\ntrain: images/train\nval: images/val\ntrain_json: ann/train.json\n"
                    f"val_json: ann/val.json\nkpt_shape: [{K}, 3]\nflip_idx: [1, 0, 2]\n")
    return yaml


ANN = {"id": 5, "image_id": 1, "category_id": 1, "bbox": [0, 0, 40, 30],
       "keypoints": [20, 15, 2, 40, 30, 1, 0, 0, 0], "num_keypoints": 2}


def test_keypoints_are_read_normalised_with_their_box(tmp_path):
    _write(tmp_path, [ANN])
    split = read_coco(tmp_path / "ann" / "train.json", tmp_path / "images" / "train", kpt_shape=(K, 3))
    (kp,) = split.keypoints
    assert kp.shape == (1, K, 3) and kp.dtype == np.float32
    assert kp[0].tolist() == [[0.25, 0.25, 2.0], [0.5, 0.5, 1.0], [0.0, 0.0, 0.0]]
    assert split.labels[0].tolist() == [[0.0, 0.25, 0.25, 0.5, 0.5]]
    assert read_coco(tmp_path / "ann" / "train.json", tmp_path / "images" / "train").keypoints is None


def test_a_labelled_keypoint_outside_its_image_becomes_unlabelled(tmp_path, caplog):
    import logging

    _write(tmp_path, [ANN | {"keypoints": [20, 15, 2, 95, 30, 2, 0, 0, 0]}])
    with caplog.at_level(logging.INFO, logger="libreyolo.data.coco"):
        split = read_coco(tmp_path / "ann" / "train.json", tmp_path / "images" / "train", kpt_shape=(K, 3))
    assert split.keypoints[0][0, 1].tolist() == [0.0, 0.0, 0.0]
    assert any("1 labelled keypoint(s) outside" in r.getMessage() for r in caplog.records)


@pytest.mark.parametrize(("ann", "names", "match"), [
    (ANN | {"keypoints": [1, 2, 2]}, None, r"annotation 5 has 3 keypoint numbers, the dataset yaml's kpt_shape needs 9"),
    ({k: v for k, v in ANN.items() if k != "keypoints"}, None, r"annotation 5 has 0 keypoint numbers"),
    (ANN | {"keypoints": [20, 15, 3, 40, 30, 1, 0, 0, 0]}, None, r"annotation 5 has keypoint visibility 3"),
    (ANN, ["nose", "left_eye"], r"category 'person' names 2 keypoints but the dataset yaml's kpt_shape is \[3, 3\]"),
])
def test_bad_keypoint_annotations_are_one_line_errors(tmp_path, ann, names, match):
    _write(tmp_path, [ann], names=names)
    with pytest.raises(DatasetError, match=match):
        read_coco(tmp_path / "ann" / "train.json", tmp_path / "images" / "train", kpt_shape=(K, 3))


def test_a_pose_dataset_from_json_equals_one_from_label_files(tmp_path):
    yaml = _write(tmp_path / "json", [ANN, ANN | {"id": 6, "bbox": [50, 10, 20, 40],
                                                  "keypoints": [55, 20, 2, 60, 40, 2, 65, 45, 1]}],
                  names=["a", "b", "c"])
    cfg = load_pose_data(str(yaml))
    assert cfg.kpt_shape == (K, 3) and set(cfg.coco) == {"train", "val"}
    files = [tmp_path / "json" / "images" / "train" / "a.png"]
    labels = cfg.pose_labels("train", files)
    from_json = PoseDataset(files, imgsz=64, nc=cfg.nc, kpt_shape=cfg.kpt_shape, labels=labels)
    # the same image with the same objects written as a YOLO pose label file
    txt_root = tmp_path / "txt"
    (txt_root / "images").mkdir(parents=True)
    (txt_root / "labels").mkdir()
    img = txt_root / "images" / "a.png"
    img.write_bytes(files[0].read_bytes())
    (cls, boxes, kpts) = labels[files[0]]
    lines = [" ".join(f"{v:.9g}" for v in [c, *b, *k.reshape(-1)]) for c, b, k in zip(cls, boxes, kpts, strict=True)]
    (txt_root / "labels" / "a.txt").write_text("\n".join(lines) + "\n")
    from_txt = PoseDataset([img], imgsz=64, nc=cfg.nc, kpt_shape=cfg.kpt_shape)
    a, b = from_json[0], from_txt[0]
    for key in ("img", "cls", "bboxes", "keypoints"):
        assert torch.equal(a[key], b[key]), key
    assert a["keypoints"].shape == (2, K, 3)


def test_the_pose_task_builds_its_datasets_from_the_json(tmp_path):
    from libreyolo.tasks.pose import PoseTask

    cfg = load_pose_data(str(_write(tmp_path, [ANN])))
    files = [tmp_path / "images" / "val" / "a.png"]
    ds = PoseTask().dataset(cfg, files, split="val", imgsz=64)
    assert ds.labels is not None and ds[0]["keypoints"].shape == (1, K, 3)
    assert ds[0]["keypoints"][0, 2].tolist() == [0.0, 0.0, 0.0]
