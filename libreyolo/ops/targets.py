"""Ground-truth boxes of a training batch, padded per image: the target layout of the dense
detection losses (YOLOv9 lineage, PicoDet).

The data loader gives flat labels (``batch_idx``, ``cls``, ``bboxes`` normalised cx, cy, w, h);
the assigners want Tensor[B, M, ...] with M the largest box count of an image and a mask of
the real boxes.
"""

from __future__ import annotations

import torch
from torch import Tensor

from .boxes import xywh_to_xyxy


def to_device(t: Tensor, device: torch.device) -> Tensor:
    """Copy a CPU tensor to ``device``; to CUDA via pinned memory, asynchronously (no host sync)."""
    if t.device == device:
        return t
    if t.device.type == "cpu" and torch.device(device).type == "cuda":
        return t.pin_memory().to(device, non_blocking=True)
    return t.to(device)


def build_targets(batch: dict[str, Tensor], *, batch_size: int, img_hw: tuple[int, int],
                  device: torch.device) -> tuple[Tensor, Tensor, Tensor]:
    """Pad the flat batch labels per image.

    batch: ``batch_idx`` (Tensor[N], int64), ``cls`` (Tensor[N]), ``bboxes`` (Tensor[N, 4]
    normalised cx, cy, w, h). Returns labels (Tensor[B, M], int64), boxes (Tensor[B, M, 4]
    xyxy pixels), mask (Tensor[B, M], bool) on ``device``, with M the largest box count of an
    image; boxes keep their order within an image.

    The padding is computed where ``batch_idx`` lives. On the CPU (the data loader's output) it
    costs no GPU work and no host synchronisation: the three results are copied asynchronously.
    On the GPU, reading M synchronises with the host (a GPU run counted two synchronisations per
    loss call in that case; the second is not located yet).

    Example:
        >>> batch = {"batch_idx": torch.tensor([1]), "cls": torch.tensor([2]),
        ...          "bboxes": torch.tensor([[0.5, 0.5, 0.5, 0.25]])}
        >>> labels, boxes, mask = build_targets(batch, batch_size=2, img_hw=(64, 64), device=torch.device("cpu"))
        >>> labels.tolist(), boxes[1].tolist(), mask.tolist()
        ([[0], [2]], [[16.0, 24.0, 48.0, 40.0]], [[False], [True]])
    """
    idx = batch["batch_idx"].reshape(-1).long()
    src = idx.device
    cls = batch["cls"].to(src).long().reshape(-1)
    boxes = batch["bboxes"].to(src).float().reshape(-1, 4)
    n = idx.numel()
    if n == 0:
        return (torch.zeros((batch_size, 0), dtype=torch.long, device=device),
                torch.zeros((batch_size, 0, 4), dtype=torch.float32, device=device),
                torch.zeros((batch_size, 0), dtype=torch.bool, device=device))
    # slot of each box = its rank among the boxes of its image (stable: input order)
    rank = (idx[:, None] == torch.arange(batch_size, device=src)).cumsum(0)  # (N, B)
    slot = rank.gather(1, idx[:, None]).squeeze(1) - 1
    m = int(rank[-1].max())  # host sync only when the labels are on the GPU
    h, w = img_hw
    boxes = boxes.clone()  # to pixels by column, with Python scalars: no host-to-device copy
    boxes[:, 0::2] *= w
    boxes[:, 1::2] *= h
    labels = torch.zeros((batch_size, m), dtype=torch.long, device=src)
    out = torch.zeros((batch_size, m, 4), dtype=torch.float32, device=src)
    mask = torch.zeros((batch_size, m), dtype=torch.bool, device=src)
    labels[idx, slot] = cls
    out[idx, slot] = xywh_to_xyxy(boxes)
    mask[idx, slot] = True
    return to_device(labels, device), to_device(out, device), to_device(mask, device)
