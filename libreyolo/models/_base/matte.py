"""Shared glue of the foreground-matte families (task ``matte``, ``-matte`` weights).

A matte family supplies :meth:`Family.build_net`: Tensor[B, 3, H, W] float in [0, 1] -> in eval
mode the matte **logits** Tensor[B, 1, H, W] (alpha = sigmoid); in train mode either the same or
``(maps, gdt_preds, gdt_labels)`` (lists of logit maps: auxiliary and final matte predictions, and
an optional gradient branch with its targets, as BiRefNet's). This base holds the rest: the
postprocess (per-image alpha in [0, 1], which the task maps back to the original image:
:mod:`libreyolo.tasks.matte`), the criterion and the declarations. A matte has no classes: ``nc``
is 1 (``names = {0: "foreground"}``). Shared code recognises such a family by ``OUTPUT_KIND == "matte"``.
"""

from __future__ import annotations

from typing import Any, ClassVar

import torch
import torch.nn.functional as F
from torch import Tensor

from .family import Family

NAMES = {0: "foreground"}


class MatteFamily(Family):
    TASKS: ClassVar[tuple[str, ...]] = ("matte",)
    OUTPUT_KIND: ClassVar[str] = "matte"
    DEFAULT_IMGSZ: ClassVar[int] = 1024
    STRIDE: ClassVar[int] = 32
    LOSS_NAMES: ClassVar[tuple[str, ...]] = ("bce", "iou", "gdt")
    OUTPUT_NAMES: ClassVar[tuple[str, ...]] = ("logits",)
    EXPORT_DYNAMIC_AXES: ClassVar[tuple[str, ...]] = ("batch",)
    SUPPORTS_CUDA_GRAPH: ClassVar[bool] = False
    CUDA_GRAPH_REASON: ClassVar[str] = "no bitwise parity run recorded yet"
    SUPPORTS_TRAIN_CUDA_GRAPH: ClassVar[bool] = False
    TRAIN_CUDA_GRAPH_REASON: ClassVar[str] = "no training-capture parity run recorded yet"

    def __init__(self, *, size: str, task: str | None = None, nc: int = 1,
                 names: dict[int, str] | list[str] | None = None, imgsz: int | None = None) -> None:
        """``nc`` is always 1 (another value, e.g. a factory's default class count, is ignored); the
        one name is ``"foreground"`` unless one name is given."""
        one = names if names is not None and len(names) == 1 else NAMES
        super().__init__(size=size, task=task, nc=1, names=one, imgsz=imgsz)

    def postprocess(self, raw: Any, *, conf: float = 0.0, iou: float = 0.0, classes: list[int] | None = None,
                    max_det: int = 0, agnostic: bool = False) -> list[Tensor]:
        """Logits Tensor[B, 1, h, w] -> per image alpha Tensor[h, w] float32 in [0, 1] (the task
        resizes it to the image). The detection options are ignored."""
        logits = raw[0] if isinstance(raw, (list, tuple)) else raw
        return list(logits.float()[:, 0].sigmoid().unbind(0))

    def build_criterion(self) -> MatteLoss:
        return MatteLoss()


class MatteLoss:
    """BCE + IoU on every predicted matte (multi-scale supervision), plus the gradient branch.

    ``criterion(preds, batch) -> (loss, items)``; ``batch["alpha"]`` Tensor[B, H, W] float in [0, 1].
    ``preds`` is a logit map Tensor[B, 1, h, w] or ``(maps, gdt_preds, gdt_labels)`` (the module
    docstring). Each map is resized bilinearly (``align_corners=True``) to the target, and adds
    ``bce * BCE(sigmoid(map), alpha)`` (mean over pixels) + ``iou * mean_i (1 - sum(p a) / sum(p + a - p a))``
    (the soft IoU per image); each gradient prediction adds ``gdt * BCE(sigmoid(pred), sigmoid(label))``
    at the label's size. Weights: BiRefNet's DIS recipe (bce 30, iou 0.5, gdt 1; its SSIM term is
    left out). loss = the weighted sum x B (the trainer's scale); items = Tensor[3] (the three terms,
    detached). No host synchronisation.

    Example:
        >>> alpha = torch.zeros(2, 8, 8); alpha[:, 2:6, 2:6] = 1.0
        >>> good, bad = (alpha * 40 - 20).unsqueeze(1), torch.zeros(2, 1, 8, 8)
        >>> float(MatteLoss()(good, {"alpha": alpha})[0]) < float(MatteLoss()(bad, {"alpha": alpha})[0])
        True
    """

    def __init__(self, *, bce: float = 30.0, iou: float = 0.5, gdt: float = 1.0) -> None:
        self.hyp: dict[str, float] = {"bce": bce, "iou": iou, "gdt": gdt}

    def __call__(self, preds: Any, batch: dict[str, Any]) -> tuple[Tensor, Tensor]:
        if isinstance(preds, Tensor):
            maps, gdt_preds, gdt_labels = [preds], [], []
        elif len(preds) == 3 and isinstance(preds[0], (list, tuple)):
            maps, gdt_preds, gdt_labels = list(preds[0]), list(preds[1]), list(preds[2])
        else:
            maps, gdt_preds, gdt_labels = list(preds), [], []
        alpha = batch["alpha"].to(maps[-1].device, non_blocking=True).float().clamp(0, 1).unsqueeze(1)
        size = tuple(alpha.shape[2:])
        bce = iou = maps[-1].new_zeros(())
        for m in maps:
            p = _resize(m.float(), size).sigmoid()
            bce = bce + F.binary_cross_entropy(p, alpha)
            inter = (p * alpha).sum(dim=(1, 2, 3))
            union = (p + alpha).sum(dim=(1, 2, 3)) - inter
            iou = iou + (1.0 - inter / union.clamp(min=1e-6)).mean()
        gdt = maps[-1].new_zeros(())
        for gp, gl in zip(gdt_preds, gdt_labels, strict=True):
            gdt = gdt + F.binary_cross_entropy(_resize(gp.float(), tuple(gl.shape[2:])).sigmoid(), gl.float().sigmoid())
        terms = torch.stack([bce * self.hyp["bce"], iou * self.hyp["iou"], gdt * self.hyp["gdt"]])
        return terms.sum() * alpha.shape[0], terms.detach()


def _resize(x: Tensor, size: tuple[int, ...]) -> Tensor:
    if tuple(x.shape[2:]) == tuple(size):
        return x
    return F.interpolate(x, size=size, mode="bilinear", align_corners=True)
