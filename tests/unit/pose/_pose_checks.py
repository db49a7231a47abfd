"""Checks every pose family's unit tests make (test_yolo9_pose.py, test_yolonas_pose.py): a
fixed two-image batch, the loss without objects, the keypoint terms going down over a few steps,
and the postprocess columns with the family's arch (``nkpt`` / ``skeleton``)."""

from __future__ import annotations

from typing import Any

import pytest
import torch
from torch import nn

from libreyolo.errors import ConfigError
from libreyolo.model import Model
from libreyolo.registry import families


def pose_batch() -> dict:
    """Two images, one object each, five keypoints (some not labelled)."""
    kpts = torch.tensor([[[0.30, 0.30, 2.0], [0.70, 0.30, 2.0], [0.70, 0.70, 2.0], [0.30, 0.70, 1.0], [0, 0, 0]],
                         [[0.0, 0.0, 0.0], [0.0, 0.0, 0.0], [0.45, 0.45, 2.0], [0.15, 0.45, 2.0], [0.3, 0.1, 2.0]]])
    return {"batch_idx": torch.tensor([0, 1]), "cls": torch.tensor([0, 1]),
            "bboxes": torch.tensor([[0.5, 0.5, 0.4, 0.4], [0.3, 0.275, 0.3, 0.35]]), "keypoints": kpts}


def check_loss_without_objects(net: nn.Module, criterion: Any) -> None:
    """``net`` (nc=2, nkpt=5, in train mode): the loss of an image without objects is finite,
    backpropagates, and its two keypoint terms are 0."""
    empty = {"batch_idx": torch.zeros(0, dtype=torch.long), "cls": torch.zeros(0), "bboxes": torch.zeros(0, 4),
             "keypoints": torch.zeros(0, 5, 3)}
    loss, items = criterion(net(torch.rand(1, 3, 64, 64)), empty)
    loss.backward()
    assert torch.isfinite(loss) and items.shape == (5,) and float(items[1]) == 0.0 and float(items[2]) == 0.0


def check_keypoint_terms_decrease(net: nn.Module, criterion: Any, *, steps: int = 8) -> None:
    """Adam on :func:`pose_batch` for ``steps`` steps: the total and the pose location and
    visibility terms go down."""
    x = torch.rand(2, 3, 64, 64, generator=torch.Generator().manual_seed(1))
    opt = torch.optim.Adam(net.parameters(), lr=2e-3)
    batch = pose_batch()
    history = []
    for _ in range(steps):
        loss, items = criterion(net(x), batch)
        opt.zero_grad()
        loss.backward()
        opt.step()
        history.append(items)
    first, last = history[0], history[-1]
    assert float(last.sum()) < float(first.sum())
    assert float(last[1]) < float(first[1]) and float(last[2]) < float(first[2])  # pose location, visibility


def check_postprocess_columns_and_arch(family: str, size: str, *, levels_error: str) -> Model:
    """A ``family`` model (nc=3): 17 keypoints and an empty arch until ``set_arch`` (4 keypoints
    and a skeleton), then postprocess rows of 6 + 3 K columns with the class filter applied and
    visibilities in (0, 1); a wrong number of levels raises ``levels_error``. Returns the model."""
    torch.manual_seed(0)
    model = Model(families()[family](size=size, nc=3))
    assert model.nkpt == 17 and model.arch == {} and model.task == "pose"
    model.set_arch(nkpt=4, skeleton=[[0, 1]])
    assert model.nkpt == 4 and model.arch == {"nkpt": 4, "skeleton": [[0, 1]]}
    dets = model.postprocess(model.eager_forward(torch.rand(2, 3, 64, 64)), conf=0.0, iou=0.7, classes=[1],
                             max_det=6, agnostic=False)
    assert len(dets) == 2 and all(d.shape == (6, 6 + 12) for d in dets)
    assert bool((dets[0][:, 5] == 1).all()) and bool(((dets[0][:, 8::3] > 0) & (dets[0][:, 8::3] < 1)).all())
    with pytest.raises(ConfigError, match=levels_error):
        model.postprocess([torch.zeros(1, 5, 2, 2)], conf=0.0, iou=0.7, classes=None, max_det=6, agnostic=False)
    return model
