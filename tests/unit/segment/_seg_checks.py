"""Checks every instance-segmentation family's unit tests make (test_rtmdet_ins.py,
test_yolo9_seg.py): parameter counting, fusing equals the unfused network, a shapes-seg batch
and a few optimiser steps on it, and the loss of a batch without instances."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import Any

import torch
from torch import nn

from libreyolo.data.segment import SegmentDataset, collate_segment, load_segment_data
from libreyolo.data.shapes_seg import ensure_shapes_seg_dataset
from libreyolo.graphs.parity import randomise_norm_stats


def n_params(net: nn.Module) -> int:
    return sum(p.numel() for p in net.parameters())


def check_fuse_equals_unfused(build: Callable[[], nn.Module]) -> None:
    """``build()`` (seed 1) with random norm statistics: ``fuse()`` gives the unfused outputs."""
    torch.manual_seed(1)
    net = build()
    randomise_norm_stats(net, seed=0)
    net.eval()
    x = torch.rand(1, 3, 64, 64)
    with torch.no_grad():
        ref = [o.clone() for o in net(x)]
        got = net.fuse()(x)
    for r, g in zip(ref, got, strict=True):
        assert (r - g).abs().max().item() <= 1e-4 * max(1.0, r.abs().max().item())


def shapes_seg_batch(root: Path, n: int = 4) -> dict:
    """The first ``n`` training items of a shapes-seg set written under ``root``, collated."""
    cfg = load_segment_data(str(ensure_shapes_seg_dataset(root, n_train=n, n_val=1, imgsz=64)))
    ds = SegmentDataset(cfg.train, imgsz=64, nc=cfg.nc)
    return collate_segment([ds[i] for i in range(n)])


def fit_on_shapes_seg(fam: Any, root: Path, *, steps: int, n_items: int) -> list[torch.Tensor]:
    """Adam on :func:`shapes_seg_batch` (which has instances) for ``steps`` steps, each loss
    finite with ``n_items`` non-negative terms; the terms of every step."""
    batch = shapes_seg_batch(root)
    assert batch["masks"].shape[0] > 0
    crit = fam.build_criterion()
    net = fam.net.train()
    opt = torch.optim.Adam(net.parameters(), lr=2e-3)
    x = batch["img"].float() / 255
    history = []
    for _ in range(steps):
        loss, items = crit(net(x), batch)
        assert torch.isfinite(loss) and items.shape == (n_items,) and bool((items >= 0).all())
        opt.zero_grad()
        loss.backward()
        opt.step()
        history.append(items)
    return history


def loss_without_instances(fam: Any) -> tuple[nn.Module, torch.Tensor]:
    """The loss of two images without instances, backpropagated and finite: (net, loss terms)."""
    batch = {"batch_idx": torch.zeros(0, dtype=torch.long), "cls": torch.zeros(0), "bboxes": torch.zeros(0, 4),
             "masks": torch.zeros(0, 16, 16, dtype=torch.uint8)}
    net = fam.net.train()
    loss, items = fam.build_criterion()(net(torch.rand(2, 3, 64, 64)), batch)
    loss.backward()
    assert torch.isfinite(loss)
    return net, items
