"""YOLOv9 pose loss: the dense-pose loss of the GELAN lineage
(:class:`libreyolo.models._gelan.pose.DensePoseLoss`, shared with yolonas_pose): the lineage's
detection terms (task-aligned assignment, CIoU box, BCE class, DFL) on the detection channels,
plus two keypoint terms on the foreground anchors the assigner picked (OKS-style location, BCE
visibility; gains box 7.5, pose 12.0, kobj 1.0, cls 0.5, dfl 1.5; module docstring there).
Keypoints decode with Ultralytics' offset scale 2 (``x = (2 * raw_x + j) * s``).
The criterion stays eager (SPEC T-2).
"""

from __future__ import annotations

from .._gelan.pose import DensePoseLoss, assigned_rows

__all__ = ["YOLO9PoseLoss", "assigned_rows"]


class YOLO9PoseLoss(DensePoseLoss):
    """``criterion(preds, batch) -> (loss, loss_items)``.

    preds: the network output (three level tensors with ``4 * reg_max + nc + 3 * nkpt`` channels).
    batch: as built by :func:`libreyolo.data.pose.collate_pose` (``batch_idx``, ``cls``, ``bboxes``
    normalised cx cy w h, ``keypoints`` Tensor[N, K, 3] x, y normalised to the input, v; images in
    batch order). Returns loss = (box + pose + kobj + cls + dfl) * B and loss_items Tensor[5] (box,
    pose, kobj, cls, dfl, gains applied, detached).

    Example:
        >>> from libreyolo.models.yolo9_pose.nn import build_yolo9_pose
        >>> net = build_yolo9_pose(size="t", nc=2, nkpt=3).train()
        >>> kpts = torch.tensor([[[0.4, 0.4, 2.0], [0.6, 0.4, 2.0], [0.5, 0.6, 0.0]]])
        >>> batch = {"batch_idx": torch.tensor([0]), "cls": torch.tensor([1]),
        ...          "bboxes": torch.tensor([[0.5, 0.5, 0.5, 0.5]]), "keypoints": kpts}
        >>> loss, items = YOLO9PoseLoss(net)(net(torch.rand(1, 3, 64, 64)), batch)
        >>> bool(torch.isfinite(loss)), items.shape
        (True, torch.Size([5]))
    """
