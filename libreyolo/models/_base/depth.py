"""Shared glue of the monocular depth families (task ``depth``, ``-depth`` weights).

A depth family supplies only :meth:`Family.build_net` (Tensor[B, 3, H, W] float in [0, 1] ->
relative depth Tensor[B, 1, h, w], in train and eval mode); this base holds the rest: the
postprocess (per-image maps, which the task maps back to the original image:
:mod:`libreyolo.tasks.depth`), the scale-and-shift-invariant criterion and the declarations.
Shared code recognises such a family by ``OUTPUT_KIND == "depth"``.

What the network predicts is **relative inverse depth** (disparity: larger = nearer, defined up to
a positive scale and a shift), the quantity the published Depth Anything models output and the
one their affine-invariant loss trains: a dataset's stored depth ``d`` becomes the target ``1/d``.
"""

from __future__ import annotations

from typing import Any, ClassVar

import torch
import torch.nn.functional as F
from torch import Tensor

from .family import Family

NAMES = {0: "depth"}


class DepthFamily(Family):
    TASKS: ClassVar[tuple[str, ...]] = ("depth",)
    OUTPUT_KIND: ClassVar[str] = "depth"
    DEFAULT_IMGSZ: ClassVar[int] = 518
    STRIDE: ClassVar[int] = 14
    LOSS_NAMES: ClassVar[tuple[str, ...]] = ("ssi",)
    # what the maps are: "disparity" (relative inverse depth, larger = nearer; Depth Anything V2) or
    # "depth" (larger = farther; Depth Anything 3). The loss trains that quantity and the validation
    # scores ``1 / depth`` for a depth family (see libreyolo.tasks.depth)
    PREDICTS: ClassVar[str] = "disparity"
    OUTPUT_NAMES: ClassVar[tuple[str, ...]] = ("depth",)
    # the ViT encoders resample their position embedding for the traced token grid, a constant of the
    # exported graph: an export serves the size it was made for
    EXPORT_DYNAMIC_AXES: ClassVar[tuple[str, ...]] = ("batch",)
    SUPPORTS_CUDA_GRAPH: ClassVar[bool] = False
    CUDA_GRAPH_REASON: ClassVar[str] = "no bitwise parity run recorded yet"
    SUPPORTS_TRAIN_CUDA_GRAPH: ClassVar[bool] = False
    TRAIN_CUDA_GRAPH_REASON: ClassVar[str] = "no bitwise parity run recorded yet"

    def __init__(self, *, size: str, task: str | None = None, nc: int = 1,
                 names: dict[int, str] | list[str] | None = None, imgsz: int | None = None) -> None:
        """A depth map has no classes: ``nc`` is always 1 (another value, e.g. a factory's default
        class count, is ignored) and the one name is ``"depth"`` unless one name is given."""
        one = names if names is not None and len(names) == 1 else NAMES
        super().__init__(size=size, task=task, nc=1, names=one, imgsz=imgsz)

    @property
    def depth_kind(self) -> str:
        """What this model's maps are, carried into ``Results.depth_kind``: :attr:`PREDICTS`
        (``"disparity"`` / ``"depth"``; a metric size says ``"metric"``)."""
        return self.PREDICTS

    def postprocess(self, raw: Any, *, conf: float = 0.0, iou: float = 0.0, classes: list[int] | None = None,
                    max_det: int = 0, agnostic: bool = False) -> list[Tensor]:
        """Depth Tensor[B, 1, h, w] -> per image Tensor[h, w] float32 (the task resizes it to the
        image). The detection options are ignored."""
        depth = raw[0] if isinstance(raw, (list, tuple)) else raw
        return list(depth.float()[:, 0].unbind(0))

    def build_criterion(self) -> SSILoss:
        return SSILoss()


def _normalise(x: Tensor, valid: Tensor) -> Tensor:
    """Per image (rows of ``x`` Tensor[B, N]): ``(x - median) / mean|x - median|`` over the valid
    entries (the MiDaS normalisation); invalid entries are left arbitrary."""
    med = torch.nanmedian(torch.where(valid, x, torch.nan), dim=1, keepdim=True).values
    med = torch.nan_to_num(med)  # an image without a valid pixel
    dev = ((x - med).abs() * valid).sum(1, keepdim=True) / valid.sum(1, keepdim=True).clamp(min=1)
    return (x - med) / dev.clamp(min=1e-6)


class SSILoss:
    """Scale-and-shift-invariant loss on disparity (Ranftl et al., MiDaS; used by Depth Anything),
    or on depth itself with ``target="depth"`` (a family whose maps are depth).

    ``criterion(preds, batch) -> (loss, items)``: preds Tensor[B, 1, h, w] (resized bilinearly to
    the target when sizes differ); ``batch["depth"]`` Tensor[B, H, W] float depth, ``<= 0`` where a
    pixel has none. The target is the disparity ``1/depth``; per image both the prediction and the
    target are shifted by their median and divided by their mean absolute deviation over the valid
    pixels, and the loss is the mean absolute difference there. loss = the mean over the images
    with a valid pixel x B (the trainer's scale, a sum over the batch); items = Tensor[1] (that mean,
    detached). No host synchronisation.

    Example:
        >>> d = torch.tensor([[[1.0, 2.0], [4.0, 0.0]]])  # one pixel without depth
        >>> loss, items = SSILoss()((3.0 / d).clamp(max=9).unsqueeze(1), {"depth": d})
        >>> round(float(items), 6)  # 3 x disparity: exact up to scale
        0.0
    """

    def __init__(self, *, target: str = "disparity") -> None:
        if target not in ("disparity", "depth"):
            raise ValueError(f"SSILoss target={target!r}; use 'disparity' or 'depth'")
        self.hyp: dict[str, float] = {}
        self.target = target

    def __call__(self, preds: Any, batch: dict[str, Any]) -> tuple[Tensor, Tensor]:
        pred = preds[0] if isinstance(preds, (list, tuple)) else preds
        depth = batch["depth"].to(pred.device, non_blocking=True).float()
        if tuple(pred.shape[2:]) != tuple(depth.shape[1:]):
            pred = F.interpolate(pred, size=tuple(depth.shape[1:]), mode="bilinear", align_corners=False)
        b = depth.shape[0]
        p, d = pred.float().reshape(b, -1), depth.reshape(b, -1)
        valid = (d > 0) & torch.isfinite(d)
        if self.target == "depth":
            disp = torch.where(valid, d, 0.0)
        else:
            disp = torch.where(valid, 1.0 / torch.where(valid, d, 1.0), 0.0)
        err = ((_normalise(p, valid) - _normalise(disp, valid)).abs() * valid).sum(1)
        n = valid.sum(1)
        per_image = err / n.clamp(min=1)
        mean = per_image.sum() / (n > 0).sum().clamp(min=1)
        return mean * b, mean.detach().view(1)
