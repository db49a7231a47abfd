"""Pose data: label parsing and its errors, the dataset yaml keys, horizontal flips through
flip_idx, the shapes-pose generator."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest
import torch

from libreyolo.data.pose import (
    PoseDataset,
    collate_pose,
    flip_keypoints_lr,
    load_pose_data,
    parse_pose_file,
)
from libreyolo.data.shapes_pose import FLIP_IDX, ensure_shapes_pose_dataset, render_pose_scene
from libreyolo.errors import DatasetError

GOOD = "1 0.5 0.5 0.4 0.4 0.3 0.3 2 0.7 0.3 1 0 0 0\n"


def _write(tmp_path: Path, text: str) -> Path:
    f = tmp_path / "a.txt"
    f.write_text(text)
    return f


def test_parse_reads_classes_boxes_keypoints(tmp_path: Path) -> None:
    cls, boxes, kpts = parse_pose_file(_write(tmp_path, GOOD + "\n0 0.2 0.2 0.1 0.1 0.2 0.2 2 0 0 0 0 0 0\n"), nc=2,
                                       kpt_shape=(3, 3))
    assert cls.tolist() == [1, 0] and boxes.shape == (2, 4) and kpts.shape == (2, 3, 3)
    assert np.allclose(kpts[0], [[0.3, 0.3, 2], [0.7, 0.3, 1], [0, 0, 0]])
    two = parse_pose_file(_write(tmp_path, "0 0.5 0.5 0.2 0.2 0.4 0.4 0.6 0.6\n"), nc=1, kpt_shape=(2, 2))[2]
    assert two[0, :, 2].tolist() == [2.0, 2.0]  # D = 2: every keypoint labelled
    assert parse_pose_file(tmp_path / "missing.txt", nc=1, kpt_shape=(3, 3))[2].shape == (0, 3, 3)


@pytest.mark.parametrize(("line", "match"), [
    ("1 0.5 0.5 0.4 0.4 0.3 0.3 2 0.7 0.3 1", r"line 2: 11 columns, a pose line with kpt_shape \[3, 3\] has 14"),
    ("1 0.5 0.5 0.4 0.4 0.3 0.3 2 0.7 0.3 1 0 0 0 7", "15 columns"),
    ("1 0.5 0.5 0.4 0.4 0.3 0.3 2 0.7 x 1 0 0 0", "non-number"),
    ("5 0.5 0.5 0.4 0.4 0.3 0.3 2 0.7 0.3 1 0 0 0", r"class id 5 is not an integer in \[0, 2\)"),
    ("1 0.5 0.5 1.4 0.4 0.3 0.3 2 0.7 0.3 1 0 0 0", "is not a normalised cx cy w h"),
    ("1 0.5 0.5 0.4 0.4 0.3 0.3 3 0.7 0.3 1 0 0 0", "visibility 3 is none of 0"),
    ("1 0.5 0.5 0.4 0.4 0.3 1.3 2 0.7 0.3 1 0 0 0", r"keypoint coordinate 1.3 is outside \[0, 1\]"),
])
def test_malformed_lines_raise_one_line_errors_naming_file_and_line(tmp_path: Path, line: str, match: str) -> None:
    f = _write(tmp_path, GOOD + line + "\n")
    with pytest.raises(DatasetError, match=match) as e:
        parse_pose_file(f, nc=2, kpt_shape=(3, 3))
    assert str(f) in str(e.value) and "line 2" in str(e.value) and "\n" not in str(e.value)


def test_an_unlabelled_keypoint_may_lie_anywhere(tmp_path: Path) -> None:
    k = parse_pose_file(_write(tmp_path, "1 0.5 0.5 0.4 0.4 0.3 0.3 2 0.7 0.3 1 5 -3 0\n"), nc=2, kpt_shape=(3, 3))[2]
    assert k[0, 2].tolist() == [0.0, 0.0, 0.0]


def test_flip_mirrors_x_and_swaps_left_and_right() -> None:
    k = np.array([[[0.2, 0.4, 2.0], [0.7, 0.5, 1.0], [0.5, 0.9, 2.0], [0.0, 0.0, 0.0]]])
    f = flip_keypoints_lr(k, [1, 0, 2, 3])
    assert np.allclose(f[0, 0], [0.3, 0.5, 1.0]) and np.allclose(f[0, 1], [0.8, 0.4, 2.0])
    assert np.allclose(f[0, 2], [0.5, 0.9, 2.0]) and f[0, 3].tolist() == [0.0, 0.0, 0.0]  # absent stays absent
    assert np.allclose(flip_keypoints_lr(f, [1, 0, 2, 3]), k)  # twice: back


def _yaml(tmp_path: Path, extra: str) -> Path:
    (tmp_path / "images" / "train").mkdir(parents=True, exist_ok=True)
    (tmp_path / "labels" / "train").mkdir(parents=True, exist_ok=True)
    import cv2

    cv2.imwrite(str(tmp_path / "images" / "train" / "a.jpg"), np.zeros((40, 60, 3), np.uint8))
    (tmp_path / "labels" / "train" / "a.txt").write_text(GOOD)
    y = tmp_path / "data.yaml"
    y.write_text(f"path: {tmp_path}\ntrain: images/train\nval: images/train\nnames: [a, b]\n{extra}")
    return y


@pytest.mark.parametrize(("extra", "match"), [
    ("", "has no 'kpt_shape'"),
    ("kpt_shape: [3, 4]\n", r"kpt_shape \[3, 4\] must be \[K, 3\]"),
    ("kpt_shape: [3, 3]\nflip_idx: [1, 0]\n", "is not a permutation of 0..2"),
    ("kpt_shape: [3, 3]\nflip_idx: [1, 2, 0]\n", "not back"),
    ("kpt_shape: [3, 3]\nskeleton: [[0, 5]]\n", "skeleton must be"),
    ("kpt_shape: [3, 3]\nkpt_sigmas: [0.1]\n", "kpt_sigmas must be 3 positive numbers"),
])
def test_bad_yaml_keys_are_refused(tmp_path: Path, extra: str, match: str) -> None:
    with pytest.raises(DatasetError, match=match):
        load_pose_data(str(_yaml(tmp_path, extra)))


def test_dataset_flip_item_matches_the_flipped_labels(tmp_path: Path) -> None:
    cfg = load_pose_data(str(_yaml(tmp_path, "kpt_shape: [3, 3]\nflip_idx: [1, 0, 2]\nkpt_sigmas: [0.1, 0.1, 0.1]\n")))
    assert cfg.kpt_shape == (3, 3) and cfg.flip_idx == [1, 0, 2] and cfg.kpt_sigmas == [0.1] * 3
    common = {"imgsz": 64, "nc": 2, "kpt_shape": cfg.kpt_shape, "flip_idx": cfg.flip_idx, "augment": True,
              "scale": (1.0, 1.0), "hsv_h": 0.0, "hsv_s": 0.0, "hsv_v": 0.0}
    plain = PoseDataset(cfg.train, fliplr=0.0, **common)[0]
    flipped = PoseDataset(cfg.train, fliplr=1.0, **common)[0]
    assert torch.equal(flipped["img"], plain["img"].flip(2))
    k, kf = plain["keypoints"][0], flipped["keypoints"][0]
    assert torch.allclose(kf[0, :2], torch.tensor([1 - k[1, 0], k[1, 1]])) and kf[0, 2] == k[1, 2]
    assert torch.allclose(kf[1, :2], torch.tensor([1 - k[0, 0], k[0, 1]])) and kf[1, 2] == k[0, 2]
    assert kf[2].tolist() == [0.0, 0.0, 0.0]
    assert torch.allclose(flipped["bboxes"][0, 0], 1 - plain["bboxes"][0, 0], atol=1e-6)
    batch = collate_pose([plain, flipped])
    assert batch["keypoints"].shape == (2, 3, 3) and batch["batch_idx"].tolist() == [0, 1]
    assert batch["kpt_sigmas"] is None  # the item carries the sigmas only when the dataset was given them


def test_letterbox_item_keypoints_land_on_the_image(tmp_path: Path) -> None:
    cfg = load_pose_data(str(_yaml(tmp_path, "kpt_shape: [3, 3]\n")))
    it = PoseDataset(cfg.train, imgsz=64, nc=2, kpt_shape=(3, 3))[0]
    # 60 x 40 image -> 64 x 43 (rounded) centred; keypoint (0.3, 0.3) of the image
    (rw, rh), (ox, oy) = it["ratio_pad"]
    assert torch.allclose(it["keypoints"][0, 0, :2] * 64, torch.tensor([0.3 * 60 * rw + ox, 0.3 * 40 * rh + oy]))


def test_shapes_pose_is_deterministic_and_flip_idx_fits_its_geometry(tmp_path: Path) -> None:
    a, objs = render_pose_scene(0, 0, 3, imgsz=96)
    b, _ = render_pose_scene(0, 0, 3, imgsz=96)
    assert np.array_equal(a, b) and len(objs) >= 1
    for cls, k in objs:
        vis = k[:, 2] > 0
        assert vis.sum() == (4 if cls == 0 else 3)
        if cls == 0:
            assert k[0, 0] < k[1, 0] and k[3, 0] < k[2, 0] and k[0, 1] < k[3, 1]  # TL left of TR, above BL
        else:
            assert k[4, 1] < min(k[2, 1], k[3, 1]) and k[3, 0] < k[2, 0]  # apex on top, base left / right
    # mirrored, the left/right corners swap: the permuted keypoints keep "left" on the left
    for _, k in objs:
        f = flip_keypoints_lr(k[None], list(FLIP_IDX), width=float(a.shape[1]))[0]
        if k[0, 2] > 0:
            assert f[0, 0] < f[1, 0]
    y = ensure_shapes_pose_dataset(tmp_path, n_train=2, n_val=1, imgsz=64)
    cfg = load_pose_data(str(y))
    assert cfg.names == {0: "square", 1: "triangle"} and cfg.kpt_shape == (5, 3) and cfg.flip_idx == list(FLIP_IDX)
    assert cfg.skeleton and len(cfg.train) == 2
    for f in cfg.train:
        lab = Path(str(f).replace("/images/", "/labels/")).with_suffix(".txt")
        assert parse_pose_file(lab, nc=2, kpt_shape=(5, 3))[0].size >= 1


def test_without_flip_idx_horizontal_flips_are_off(tmp_path: Path, caplog: pytest.LogCaptureFixture) -> None:
    cfg = load_pose_data(str(_yaml(tmp_path, "kpt_shape: [3, 3]\n")))
    assert cfg.flip_idx is None
    with caplog.at_level("WARNING"):
        ds = PoseDataset(cfg.train, imgsz=64, nc=2, kpt_shape=(3, 3), augment=True, fliplr=1.0, scale=(1.0, 1.0),
                         hsv_h=0.0, hsv_s=0.0, hsv_v=0.0)
    assert ds.flips[0] == 0.0 and "no flip_idx" in caplog.text
    plain = PoseDataset(cfg.train, imgsz=64, nc=2, kpt_shape=(3, 3), augment=True, fliplr=0.0, scale=(1.0, 1.0),
                        hsv_h=0.0, hsv_s=0.0, hsv_v=0.0)
    assert torch.equal(ds[0]["keypoints"], plain[0]["keypoints"])


def test_a_detection_model_is_told_shapes_pose_is_a_pose_dataset() -> None:
    from libreyolo.data.config import load_data_config

    with pytest.raises(DatasetError, match="is a pose dataset"):
        load_data_config("shapes-pose")

