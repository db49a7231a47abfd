"""Pose training augmentation beyond scale / place / flip: detection's random affine with the
keypoints moved as points (a keypoint lands where the warped image puts its marked pixel, within a
pixel; one that leaves the canvas becomes v = 0 with coordinates zeroed), mixup (both instance
sets kept), ``single_cls`` and ``rect`` (aspect-sorted rectangular items, padded collate), also
through the task and a one-epoch yolo9_pose train."""

from __future__ import annotations

from pathlib import Path
from types import SimpleNamespace

import numpy as np
import pytest
import torch

from libreyolo._cv import cv2
from libreyolo.data.pose import PoseDataset, collate_pose, transform_keypoints

S = 64
PLAIN = {"hsv_h": 0.0, "hsv_s": 0.0, "hsv_v": 0.0, "fliplr": 0.0, "flipud": 0.0, "scale": (1.0, 1.0)}
MARK = (20, 18)  # x, y of the 3 x 3 white marker's centre pixel


def _marked(root: Path, name: str = "a", *, hw: tuple[int, int] = (S, S), line: str | None = None) -> Path:
    """A black image with a white 3 x 3 marker at MARK; one object whose keypoint 0 is the marker's
    centre and keypoint 1 sits near the top-left corner."""
    (root / "images").mkdir(parents=True, exist_ok=True)
    (root / "labels").mkdir(exist_ok=True)
    h, w = hw
    img = np.zeros((h, w, 3), np.uint8)
    x, y = MARK
    img[y - 1:y + 2, x - 1:x + 2] = 255
    f = root / "images" / f"{name}.png"
    cv2.imwrite(str(f), img)
    kx, ky = (x + 0.5) / w, (y + 0.5) / h  # the pixel centre, in the label convention
    if line is None:
        line = f"1 0.4 0.4 0.7 0.7 {kx:.6f} {ky:.6f} 2 {1.5 / w:.6f} {1.5 / h:.6f} 2\n"
    (root / "labels" / f"{name}.txt").write_text(line)
    return f


def _centroid(img: torch.Tensor) -> np.ndarray:
    """Intensity centroid (pixel-centre x, y) of what is brighter than the grey border fill."""
    g = img[0].numpy().astype(np.float64)
    wts = np.clip(g - 114.0, 0, None)
    ys, xs = np.mgrid[:g.shape[0], :g.shape[1]]
    return np.array([(wts * xs).sum() / wts.sum(), (wts * ys).sum() / wts.sum()])


def test_transform_keypoints_divides_and_hides_what_leaves_the_canvas() -> None:
    kp = np.array([[[10.0, 10.0, 2.0], [60.0, 5.0, 1.0], [0.0, 0.0, 0.0]]])
    shift = np.array([[1.0, 0, 8], [0, 1.0, -2], [0, 0, 1]])
    out = transform_keypoints(kp, shift, (64, 64))
    assert out[0, 0].tolist() == [18.0, 8.0, 2.0]
    assert out[0, 1].tolist() == [0.0, 0.0, 0.0]  # x = 68 is off the 64-wide canvas
    assert out[0, 2].tolist() == [0.0, 0.0, 0.0]  # unlabelled stays unlabelled
    persp = np.array([[1.0, 0, 0], [0, 1.0, 0], [0.01, 0, 1]])
    assert np.allclose(transform_keypoints(kp[:, :1], persp, (64, 64))[0, 0, :2], [10 / 1.1, 10 / 1.1])


@pytest.mark.parametrize("perspective", [0.0, 0.0005])
def test_a_keypoint_moved_by_the_affine_lands_on_the_warped_marker(tmp_path: Path, perspective: float) -> None:
    f = _marked(tmp_path)
    ds = PoseDataset([f], imgsz=S, nc=2, kpt_shape=(2, 3), augment=True, degrees=30.0, translate=0.1, shear=10.0,
                     perspective=perspective, **PLAIN)
    plain = PoseDataset([f], imgsz=S, nc=2, kpt_shape=(2, 3), augment=True, **PLAIN)[0]
    assert np.allclose(plain["keypoints"][0, 0, :2].numpy() * S, np.array(MARK) + 0.5)
    moved = 0
    for epoch in range(6):
        ds.set_epoch(epoch)
        it = ds[0]
        assert it["keypoints"].shape == (1, 2, 3) and it["keypoints"][0, 0, 2] == 2
        kp = it["keypoints"][0, 0, :2].numpy() * S
        assert np.abs(kp - (_centroid(it["img"]) + 0.5)).max() < 1.0, (epoch, kp, _centroid(it["img"]))
        moved += float(np.abs(kp - (np.array(MARK) + 0.5)).max()) > 2
        b = it["bboxes"][0].numpy() * S  # the box still holds the keypoint it carries
        assert b[0] - b[2] / 2 - 1 <= kp[0] <= b[0] + b[2] / 2 + 1 and b[1] - b[3] / 2 - 1 <= kp[1] <= b[1] + b[3] / 2 + 1
    assert moved >= 3  # the affine did move it


def test_keypoints_that_leave_the_image_become_invisible(tmp_path: Path) -> None:
    f = _marked(tmp_path)
    ds = PoseDataset([f], imgsz=S, nc=2, kpt_shape=(2, 3), augment=True, degrees=40.0, translate=0.3, **PLAIN)
    hidden = 0
    for epoch in range(12):
        ds.set_epoch(epoch)
        kp = ds[0]["keypoints"]
        if len(kp) == 0:
            continue
        vis = kp[..., 2] > 0
        assert ((kp[..., :2] >= 0) & (kp[..., :2] <= 1)).all()
        assert (kp[~vis] == 0).all()  # invisible: coordinates zeroed (the pose label convention)
        hidden += int((~vis[:, 1]).sum())  # the corner keypoint is the one that leaves
    assert hidden >= 2


def test_mixup_keeps_both_instance_sets(tmp_path: Path) -> None:
    files = [_marked(tmp_path, "a"),
             _marked(tmp_path, "b", line="0 0.7 0.7 0.3 0.3 0.6 0.6 2 0.8 0.8 1\n0 0.2 0.7 0.2 0.2 0.2 0.7 2 0 0 0\n")]
    cv2.imwrite(str(files[1]), np.full((S, S, 3), 200, np.uint8))
    alone = PoseDataset(files, imgsz=S, nc=2, kpt_shape=(2, 3), augment=True, **PLAIN)
    mixed = PoseDataset(files, imgsz=S, nc=2, kpt_shape=(2, 3), augment=True, mixup=1.0, **PLAIN)
    blended = 0
    for epoch in range(6):
        alone.set_epoch(epoch)
        mixed.set_epoch(epoch)
        a, b = alone[0], mixed[0]
        n = len(a["cls"])
        assert len(b["cls"]) in (n + 1, n + 2)  # the second image's objects come after the first's
        assert torch.equal(b["cls"][:n], a["cls"]) and torch.equal(b["keypoints"][:n], a["keypoints"])
        assert torch.allclose(b["bboxes"][:n], a["bboxes"])
        assert b["keypoints"].shape[1:] == (2, 3) and len(b["bboxes"]) == len(b["cls"])
        if len(b["cls"]) == n + 2:  # the second pick was image b: its pixels are blended in
            blended += 1
            assert not torch.equal(a["img"], b["img"])
    assert blended >= 1


def test_single_cls_makes_every_object_class_zero(tmp_path: Path) -> None:
    files = [_marked(tmp_path, "a"), _marked(tmp_path, "b", line="0 0.5 0.5 0.2 0.2 0.5 0.5 2 0 0 0\n")]
    many = PoseDataset(files, imgsz=S, nc=2, kpt_shape=(2, 3))
    one = PoseDataset(files, imgsz=S, nc=2, kpt_shape=(2, 3), single_cls=True)
    assert {int(many[i]["cls"][0]) for i in range(2)} == {0, 1}
    for i in range(2):
        assert one[i]["cls"].tolist() == [0] * len(many[i]["cls"])
        assert torch.equal(one[i]["keypoints"], many[i]["keypoints"])


def test_rect_items_are_aspect_sorted_and_collate_pads(tmp_path: Path) -> None:
    files = [_marked(tmp_path, "tall", hw=(64, 30)), _marked(tmp_path, "wide", hw=(32, 64)),
             _marked(tmp_path, "wide2", hw=(24, 64))]
    ds = PoseDataset(files, imgsz=S, nc=2, kpt_shape=(2, 3), rect=True, stride=32)
    assert [p.stem for p in ds.files] == ["wide2", "wide", "tall"]  # by h / w
    its = [ds[i] for i in range(3)]
    assert [tuple(it["img"].shape[1:]) for it in its] == [(32, 64), (32, 64), (64, 32)]  # ceil to 32
    ds.set_batch_shapes(2)
    its = [ds[i] for i in range(3)]
    assert [tuple(it["img"].shape[1:]) for it in its] == [(32, 64), (32, 64), (64, 32)]
    for it in its:
        h, w = it["img"].shape[1:]
        kp = it["keypoints"][0, 0, :2].numpy() * (w, h)
        assert np.abs(kp - (_centroid(it["img"]) + 0.5)).max() < 1.0
    batch = collate_pose([its[0], its[2]])
    H, W = batch["img"].shape[2:]
    assert (H, W) == (64, 64) and (batch["img"][0, :, 32:] == 114).all()
    for j, it in enumerate((its[0], its[2])):
        h, w = it["img"].shape[1:]
        assert torch.equal(batch["img"][j, :, :h, :w], it["img"])
        assert torch.allclose(batch["keypoints"][j, :, :2] * torch.tensor([W, H]),
                              it["keypoints"][0, :, :2] * torch.tensor([w, h]))
        assert torch.allclose(batch["bboxes"][j] * torch.tensor([W, H, W, H]),
                              it["bboxes"][0] * torch.tensor([w, h, w, h]))


def test_the_task_passes_affine_mixup_single_cls_and_rect(tmp_path: Path) -> None:
    from libreyolo.tasks.pose import PoseTask
    from libreyolo.training.config import TrainConfig

    files = [_marked(tmp_path, "a"), _marked(tmp_path, "b")]
    cfg = TrainConfig(single_cls=True, rect=True, degrees=15.0, shear=2.0, mixup=0.5)
    task = PoseTask()
    task.check_train_options(cfg)  # accepted now
    config = SimpleNamespace(nc=2, kpt_shape=(2, 3), flip_idx=[0, 1], kpt_sigmas=None)
    train = task.dataset(config, files, split="train", imgsz=S, augment=True, train_cfg=cfg)
    assert train.single_cls and train.rect and train.affine and train.hyp.degrees == 15.0 and train.hyp.mixup == 0.5
    val = task.dataset(config, files, split="val", imgsz=S, train_cfg=cfg)
    assert val.single_cls and val.rect and not val.augment
    assert all(int(c) == 0 for i in range(2) for c in train[i]["cls"])


def test_one_epoch_yolo9_pose_with_rect_and_single_cls(tmp_path: Path) -> None:
    from libreyolo.data.shapes_pose import ensure_shapes_pose_dataset
    from libreyolo.model import Model
    from libreyolo.registry import families

    data = ensure_shapes_pose_dataset(tmp_path / "ds", n_train=4, n_val=2, imgsz=96)
    torch.manual_seed(0)
    model = Model(families()["yolo9_pose"](size="t", nc=2))
    out = model.train(data=str(data), epochs=1, imgsz=64, batch=2, workers=0, device="cpu", lr0=1e-3, rect=True,
                      single_cls=True, degrees=10.0, project=str(tmp_path / "runs"), verbose=False,
                      tensorboard=False, plots=False)
    assert len(model.names) == 1 and model.nkpt == 5
    for key in ("mAP50-95", "kpt_mAP50-95", "fitness"):
        assert 0.0 <= out[key] <= 1.0, key


def _marker_positions(root: Path) -> list[Path]:
    """Four marked images whose markers sit at different places (MARK shifted per image)."""
    files = []
    for k, (dx, dy) in enumerate([(0, 0), (20, 4), (6, 26), (24, 30)]):
        (root / "images").mkdir(parents=True, exist_ok=True)
        (root / "labels").mkdir(exist_ok=True)
        img = np.zeros((S, S, 3), np.uint8)
        x, y = MARK[0] + dx, MARK[1] + dy
        img[y - 1:y + 2, x - 1:x + 2] = 255
        f = root / "images" / f"m{k}.png"
        cv2.imwrite(str(f), img)
        (root / "labels" / f"m{k}.txt").write_text(
            f"1 {x / S:.6f} {y / S:.6f} 0.3 0.3 {(x + 0.5) / S:.6f} {(y + 0.5) / S:.6f} 2 0 0 0\n")
        files.append(f)
    return files


def test_a_mosaic_moves_every_keypoint_with_its_image_and_stops_when_closed(tmp_path: Path) -> None:
    files = _marker_positions(tmp_path)
    ds = PoseDataset(files, imgsz=S, nc=2, kpt_shape=(2, 3), augment=True, mosaic=1.0, **PLAIN)
    assert ds.mosaic_enabled
    seen = 0
    for i in range(len(files)):
        for epoch in range(3):
            ds.set_epoch(epoch)
            item = ds[i]
            img, kp, boxes = item["img"], item["keypoints"], item["bboxes"]
            assert img.shape == (3, S, S) and kp.shape[1:] == (2, 3) and 1 <= len(kp) <= 4
            assert torch.equal(item["img"], ds[i]["img"])  # a pure function of (seed, epoch, i)
            assert float(boxes.min()) >= 0.0 and float(boxes[:, :2].max()) <= 1.0
            for obj in kp:
                if obj[0, 2] > 0:  # the marker's centre: its pixel is (still) bright after halving
                    px, py = (int(v) for v in (obj[0, :2] * S - 0.5).round())
                    patch = img[0, max(py - 1, 0):py + 2, max(px - 1, 0):px + 2]
                    assert int(patch.max()) >= 200, (i, epoch, px, py)
                    seen += 1
                assert obj[1].tolist() == [0.0, 0.0, 0.0]  # unlabelled stays unlabelled
    assert seen >= 3 * len(files)  # most markers survive the random centre: the check above ran
    ds.close_mosaic()
    assert not ds.mosaic_enabled
    assert all(len(ds[i]["keypoints"]) == 1 for i in range(len(files)))  # one placed image, one object
    rect = PoseDataset(files, imgsz=S, nc=2, kpt_shape=(2, 3), augment=True, mosaic=1.0, rect=True, **PLAIN)
    assert not rect.mosaic_enabled  # rectangular items never mosaic


def test_the_task_passes_mosaic_from_the_trainer(tmp_path: Path) -> None:
    from libreyolo.tasks.pose import PoseTask
    from libreyolo.training.config import TrainConfig

    files = _marker_positions(tmp_path)
    config = SimpleNamespace(nc=2, kpt_shape=(2, 3), flip_idx=[0, 1], kpt_sigmas=None)
    on = PoseTask().dataset(config, files, split="train", imgsz=S, augment=True, train_cfg=TrainConfig(mosaic=0.7))
    off = PoseTask().dataset(config, files, split="train", imgsz=S, augment=True, train_cfg=TrainConfig(mosaic=0.0))
    assert on.mosaic == 0.7 and on.mosaic_enabled and not off.mosaic_enabled
    val = PoseTask().dataset(config, files, split="val", imgsz=S, train_cfg=TrainConfig(mosaic=1.0))
    assert not val.mosaic_enabled
