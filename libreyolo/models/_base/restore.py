"""Shared glue of the image-restoration families (task ``restore``, ``-restore`` weights).

A restoration family supplies :meth:`Family.build_net` (Tensor[B, 3, H, W] float in [0, 1] ->
the restored image Tensor[B, 3, s*H, s*W], ``s`` = :attr:`RestoreFamily.SCALE`, in train and
eval mode) and its ``STRIDE`` (the multiple H and W must be); this base class holds the rest:
the postprocess (per-image images clamped to [0, 1], which the task crops back to each input:
:mod:`libreyolo.tasks.restore`), the pixel loss and the declarations. A restoration model has
no classes: ``nc`` is always 1 (``names = {0: "image"}``). Shared code recognises such a family
by ``OUTPUT_KIND == "restore"``.
"""

from __future__ import annotations

from typing import Any, ClassVar

import torch
from torch import Tensor

from ...errors import ConfigError, DatasetError
from .family import Family


class RestoreFamily(Family):
    TASKS: ClassVar[tuple[str, ...]] = ("restore",)
    OUTPUT_KIND: ClassVar[str] = "restore"
    SCALE: ClassVar[int] = 1  # output size / input size
    DEFAULT_IMGSZ: ClassVar[int] = 64  # the training patch (LQ side)
    LOSS_NAMES: ClassVar[tuple[str, ...]] = ("l1",)
    LOSS: ClassVar[str] = "l1"  # the training loss: "l1" or "psnr" (RestoreLoss)
    OUTPUT_NAMES: ClassVar[tuple[str, ...]] = ("image",)
    EXPORT_DYNAMIC_AXES: ClassVar[tuple[str, ...]] = ("batch", "height", "width")
    SUPPORTS_CUDA_GRAPH: ClassVar[bool] = False
    CUDA_GRAPH_REASON: ClassVar[str] = "no bitwise parity run recorded yet"
    SUPPORTS_TRAIN_CUDA_GRAPH: ClassVar[bool] = False
    TRAIN_CUDA_GRAPH_REASON: ClassVar[str] = "no bitwise parity run recorded yet"

    def __init__(self, *, size: str, task: str | None = None, nc: int = 1, names: Any = None,
                 imgsz: int | None = None) -> None:
        super().__init__(size=size, task=task, nc=1, names={0: "image"}, imgsz=imgsz)

    def postprocess(self, raw: Any, *, conf: float = 0.0, iou: float = 0.0, classes: list[int] | None = None,
                    max_det: int = 0, agnostic: bool = False) -> list[Tensor]:
        """Images Tensor[B, 3, h, w] -> per image Tensor[3, h, w] float32 clamped to [0, 1]. The
        detection options are ignored."""
        out = raw[0] if isinstance(raw, (list, tuple)) else raw
        return list(out.float().clamp(0.0, 1.0).unbind(0))

    def build_criterion(self) -> RestoreLoss:
        return RestoreLoss(self.LOSS)


class RestoreLoss:
    """The pixel loss against the HQ patches ``batch["target"]`` (uint8 or float in [0, 1]).

    ``kind="l1"``: the mean absolute difference; ``kind="psnr"`` (NAFNet's paper): the negative
    PSNR, ``10 log10(mean squared error + 1e-8)`` averaged over the images. ``criterion(pred,
    batch) -> (loss, items)``: loss = the mean x B (the trainer's loss scale: a sum over the
    batch), items = Tensor[1] (the mean, detached).

    Example:
        >>> loss, items = RestoreLoss()(torch.full((2, 3, 4, 4), 0.5), {"target": torch.zeros(2, 3, 4, 4)})
        >>> float(loss), float(items)
        (1.0, 0.5)
    """

    def __init__(self, kind: str = "l1") -> None:
        if kind not in ("l1", "psnr"):
            raise ConfigError(f"restoration loss must be 'l1' or 'psnr', got {kind!r}")
        self.kind = kind
        self.hyp: dict[str, float] = {}

    def __call__(self, preds: Any, batch: dict[str, Any]) -> tuple[Tensor, Tensor]:
        pred = (preds[0] if isinstance(preds, (list, tuple)) else preds).float()
        target = batch["target"].to(pred.device, non_blocking=True)
        target = target.float().div(255.0) if not target.is_floating_point() else target.float()
        if pred.shape != target.shape:
            raise DatasetError(f"the model returns {tuple(pred.shape[2:])} images but the HQ patches are "
                               f"{tuple(target.shape[2:])}: the dataset's 'scale' must be the model's")
        if self.kind == "l1":
            value = (pred - target).abs().mean()
        else:
            value = (10.0 * torch.log10((pred - target).pow(2).mean(dim=(1, 2, 3)) + 1e-8)).mean()
        return value * pred.shape[0], value.detach().view(1)
