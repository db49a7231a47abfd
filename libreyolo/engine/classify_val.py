"""Classification validation: top-1 / top-5 accuracy (``fitness`` = top-1).

Used by :func:`libreyolo.engine.validator.validate` and ``run_validation`` when the model's
capability ``OUTPUT_KIND`` is ``"probs"``.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Iterable
from typing import TYPE_CHECKING, Any

import torch
from torch import Tensor

from ..device import autocast

if TYPE_CHECKING:
    from ..models._base.family import Family

logger = logging.getLogger(__name__)


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


def run_classify_validation(*, model: Family, net: torch.nn.Module, loader: Iterable[dict[str, Any]],
                            names: dict[int, str], amp_dtype: torch.dtype | None = None, verbose: bool = True,
                            progress: bool = True) -> dict[str, float]:
    """Score ``net`` over a loader of ``{"img": uint8 Tensor[B, 3, S, S], "cls": Tensor[B]}`` batches.

    Returns top1, top5, fitness (= top1), images, ms_per_image and, per class, top-1 accuracy
    logged in a table when ``verbose``.
    """
    from tqdm import tqdm

    device = next(net.parameters()).device
    was_training = net.training
    net.eval()
    all_p, all_t = [], []
    t_inf, n_img = 0.0, 0
    try:
        with torch.inference_mode():
            for batch in tqdm(loader, desc="val", leave=False, disable=not progress, dynamic_ncols=True):
                imgs = batch["img"].to(device, non_blocking=True).float().div_(255.0)
                t0 = time.perf_counter()
                with autocast(device, amp_dtype, cache=True):
                    raw = net(imgs)
                probs = torch.stack(model.postprocess(raw, conf=0.0, iou=0.0, classes=None, max_det=1, agnostic=False))
                if device.type == "cuda":
                    torch.cuda.synchronize(device)
                t_inf += time.perf_counter() - t0
                n_img += imgs.shape[0]
                all_p.append(probs.float().cpu())
                all_t.append(batch["cls"].view(-1).cpu())
    finally:
        net.train(was_training)
    probs = torch.cat(all_p) if all_p else torch.zeros(0, len(names))
    target = torch.cat(all_t) if all_t else torch.zeros(0, dtype=torch.int64)
    out = accuracy(probs, target)
    out.update(fitness=out["top1"], images=float(n_img), ms_per_image=1000 * t_inf / max(n_img, 1))
    if verbose:
        lines = [f"{'class':>16} {'images':>8} {'top1':>7}", f"{'all':>16} {n_img:>8} {out['top1']:>7.3f}  "
                 f"(top5 {out['top5']:.3f})"]
        if len(target):
            hit = probs.argmax(1) == target
            for c, name in names.items():
                sel = target == c
                if sel.any():
                    lines.append(f"{name:>16} {int(sel.sum()):>8} {float(hit[sel].float().mean()):>7.3f}")
        logger.info("\n%s", "\n".join(lines))
    return out
