"""Top-1 / top-5 accuracy of a classifier over a split, with a per-class table."""

from __future__ import annotations

from typing import Any

import torch
from torch import Tensor


def topk_correct(probs: Tensor, target: Tensor, *, k: int = 5) -> tuple[Tensor, Tensor]:
    """Per sample (bool Tensor[N], bool Tensor[N]): is ``target`` the argmax / among the top ``k``.

    probs: Tensor[N, nc] scores (any monotone transform of probabilities); target: Tensor[N] ids.
    With fewer than ``k`` classes, top-k is top-nc (always True).
    """
    k = min(k, probs.shape[1])
    top = probs.topk(k, dim=1).indices
    hit = top == target.view(-1, 1).to(top.device)
    return hit[:, 0], hit.any(dim=1)


def accuracy(probs: Tensor, target: Tensor) -> dict[str, float]:
    """``{"top1", "top5"}`` accuracies in [0, 1] over a set (Tensor[N, nc], Tensor[N])."""
    if probs.shape[0] == 0:
        return {"top1": 0.0, "top5": 0.0}
    t1, t5 = topk_correct(probs, target)
    return {"top1": float(t1.float().mean()), "top5": float(t5.float().mean())}


class ClassifyScorer:
    """Collects ``{"img", "cls"}`` batches' probabilities and targets; :meth:`result` gives top1,
    top5, fitness (= top1), images and ms_per_image (a plain dict)."""

    def __init__(self, names: dict[int, str]) -> None:
        self.names = names
        self.probs: list[Tensor] = []
        self.targets: list[Tensor] = []

    def add(self, batch: dict[str, Any], outputs: Tensor, *, input_hw: tuple[int, int]) -> None:
        self.probs.append(outputs.float().cpu())
        self.targets.append(batch["cls"].view(-1).cpu())

    def result(self, *, images: int, speed: dict[str, float], ms_per_image: float, losses: dict[str, float],
               save_dir: Any) -> dict[str, float]:
        probs = torch.cat(self.probs) if self.probs else torch.zeros(0, len(self.names))
        target = torch.cat(self.targets) if self.targets else torch.zeros(0, dtype=torch.int64)
        out = accuracy(probs, target)
        out.update(fitness=out["top1"], images=float(images), ms_per_image=ms_per_image)
        self._table = (probs, target)
        return out

    def summary(self, result: dict[str, float]) -> str:
        """The per-class table :func:`~libreyolo.engine.validator.run_validation` logs."""
        probs, target = self._table
        n = int(result["images"])
        lines = [f"{'class':>16} {'images':>8} {'top1':>7}", f"{'all':>16} {n:>8} {result['top1']:>7.3f}  "
                 f"(top5 {result['top5']:.3f})"]
        if len(target):
            hit = probs.argmax(1) == target
            for c, name in self.names.items():
                sel = target == c
                if sel.any():
                    lines.append(f"{name:>16} {int(sel.sum()):>8} {float(hit[sel].float().mean()):>7.3f}")
        return "\n".join(lines)
