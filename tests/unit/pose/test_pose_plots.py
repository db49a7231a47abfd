"""Pose pictures: training and validation batches show the keypoints (and the skeleton), not only
the boxes."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import torch

from libreyolo.engine.val_plots import plot_train_batch, plot_val_batch


def _batch() -> dict:
    img = np.full((2, 3, 64, 64), 40, np.uint8)
    kp = torch.tensor([[[0.25, 0.25, 2.0], [0.75, 0.25, 2.0], [0.5, 0.75, 2.0]],
                       [[0.30, 0.40, 2.0], [0.0, 0.0, 0.0], [0.6, 0.6, 1.0]]])
    return {"img": torch.from_numpy(img), "batch_idx": torch.tensor([0, 1]), "cls": torch.tensor([0, 1]),
            "bboxes": torch.tensor([[0.5, 0.5, 0.6, 0.6], [0.45, 0.5, 0.4, 0.4]]), "keypoints": kp}


def _pixels(path: Path) -> np.ndarray:
    from libreyolo._cv import cv2

    return cv2.imread(str(path), cv2.IMREAD_COLOR).astype(np.int64)


def test_train_and_val_pictures_draw_the_keypoints_and_the_skeleton(tmp_path: Path) -> None:
    batch = _batch()
    boxes_only = {k: v for k, v in batch.items() if k != "keypoints"}
    a = plot_train_batch(batch, tmp_path / "with.png", names={0: "a", 1: "b"}, skeleton=[[0, 1], [1, 2]])
    b = plot_train_batch(boxes_only, tmp_path / "without.png", names={0: "a", 1: "b"})
    c = plot_train_batch(batch, tmp_path / "no_skeleton.png", names={0: "a", 1: "b"})
    pa, pb, pc = _pixels(a), _pixels(b), _pixels(c)
    assert pa.shape == pb.shape and np.abs(pa - pb).sum() > 0  # keypoints drawn
    assert np.abs(pa - pc).sum() > 0  # and the skeleton's lines
    # validation: predictions carry 6 + 3K columns; the keypoints of both sides are drawn
    imgs = batch["img"].numpy()
    preds = [np.array([[6.0, 6.0, 50.0, 50.0, 0.9, 0.0, 16, 16, 0.9, 48, 16, 0.9, 32, 48, 0.2]]),
             np.zeros((0, 15))]
    v = plot_val_batch(imgs, {k: batch[k].numpy() for k in ("batch_idx", "cls", "bboxes", "keypoints")}, preds,
                       {0: "a", 1: "b"}, tmp_path / "val.png", skeleton=[[0, 1]])
    w = plot_val_batch(imgs, {k: batch[k].numpy() for k in ("batch_idx", "cls", "bboxes")},
                       [p[:, :6] for p in preds], {0: "a", 1: "b"}, tmp_path / "val_boxes.png")
    assert np.abs(_pixels(v) - _pixels(w)).sum() > 0


def test_pose_training_writes_keypoint_pictures(tmp_path: Path) -> None:
    from libreyolo.data.shapes_pose import ensure_shapes_pose_dataset
    from libreyolo.model import Model
    from libreyolo.registry import families

    data = ensure_shapes_pose_dataset(tmp_path / "ds", n_train=4, n_val=2, imgsz=96)
    torch.manual_seed(0)
    model = Model(families()["yolo9_pose"](size="t", nc=2))
    model.train(data=str(data), epochs=1, imgsz=64, batch=2, workers=0, device="cpu", lr0=1e-3,
                project=str(tmp_path / "runs"), name="p", verbose=False, tensorboard=False, plots=True)
    run = tmp_path / "runs" / "p"
    for name in ("train_batch0.png", "val_batch0.png", "confusion_matrix.png"):
        assert (run / name).is_file(), sorted(p.name for p in run.iterdir())
