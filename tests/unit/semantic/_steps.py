"""Shared by the semantic families' user-path tests: a few AdamW steps on one shapes-sem batch."""

from __future__ import annotations

from pathlib import Path

import torch

from libreyolo import LibreYOLO
from libreyolo.data.semantic import SemanticDataset, collate_semantic, load_semantic_data


def loss_history(weights: str, data: Path, *, imgsz: int, augment: bool, steps: int = 6) -> list[float]:
    """The cross-entropy after each of ``steps`` AdamW steps (lr 1e-3) of an untrained ``weights``
    model on the whole shapes-sem train split as one batch (seed 0)."""
    cfg = load_semantic_data(data)
    ds = SemanticDataset(cfg.train, imgsz=imgsz, nc=cfg.nc, augment=augment)
    batch = collate_semantic([ds[i] for i in range(len(ds))])
    torch.manual_seed(0)
    model = LibreYOLO(weights, pretrained=False, nc=cfg.nc)
    net, criterion = model.net.train(), model.build_criterion()
    opt = torch.optim.AdamW(net.parameters(), lr=1e-3)
    x = batch["img"].float() / 255
    losses = []
    for _ in range(steps):
        loss, items = criterion(net(x), batch)
        opt.zero_grad()
        loss.backward()
        opt.step()
        losses.append(float(items))
    return losses
