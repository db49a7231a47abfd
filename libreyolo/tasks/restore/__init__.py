"""Image restoration: denoising / deblurring (same size out) and super-resolution (``scale`` x).

Prediction runs the whole image at its own size (with ``rect=True``, the default, ``imgsz`` is not
used): a batch is padded on the right and bottom (edge pixels repeated) to a common size that is a
multiple of the network's ``stride`` (16 for NAFNet, 1 for RRDBNet and SwinIR), and each output is cropped
back to its image (x ``scale``). ``rect=False`` pads every image to ``imgsz`` instead (what a
fixed-size export needs; an image larger than ``imgsz`` is refused). ``Results.restored`` is Tensor[3, s*H, s*W] float32 RGB in [0, 1] on the CPU, in the
image's own orientation (:mod:`libreyolo.engine.restore_io`: ``save()`` writes it, ``plot()``
shows input and output side by side). Datasets are paired LQ / HQ folders
(:mod:`libreyolo.data.restore`); the built-in demos are ``data="shapes-denoise"``,
``data="shapes-sr"`` (x4) and ``data="shapes-sr2"`` (x2). Validation scores PSNR and SSIM (:mod:`.scoring`); fitness is PSNR.
"""

from __future__ import annotations

from typing import Any, ClassVar

import torch
import torch.nn.functional as F
from torch import Tensor

from ...errors import ConfigError
from ..base import Task, run_defaults, to_host


def pad_batch(images: list[Tensor], multiple: int) -> Tensor:
    """Images Tensor[3, h_i, w_i] -> Tensor[B, 3, H, W]: each padded on the right and bottom by
    repeating its edge pixels, H and W the largest sides rounded up to ``multiple``.

    Example:
        >>> pad_batch([torch.ones(3, 5, 7)], 4).shape
        torch.Size([1, 3, 8, 8])
    """
    m = max(int(multiple), 1)
    hh = -(-max(int(t.shape[1]) for t in images) // m) * m
    ww = -(-max(int(t.shape[2]) for t in images) // m) * m
    out = []
    for t in images:
        ph, pw = hh - t.shape[1], ww - t.shape[2]
        if ph or pw:
            t = F.pad(t[None].float(), (0, pw, 0, ph), mode="replicate")[0] if t.is_floating_point() else \
                F.pad(t[None].float(), (0, pw, 0, ph), mode="replicate")[0].to(t.dtype)
        out.append(t)
    return torch.stack(out)


class RestoreTask(Task):
    name: ClassVar[str] = "restore"
    results_field: ClassVar[str] = "restored"
    project: ClassVar[str] = "runs/restore"
    val_losses: ClassVar[bool] = True  # the validation HQ patches are the training targets too
    metric_keys: ClassVar[tuple[str, ...]] = ("psnr", "ssim")

    def __init__(self) -> None:
        from ...data.restore import collate_restore

        self.collate = collate_restore

    # ------------------------------------------------------------------ prediction
    def preprocess(self, items: list[Any], *, imgsz: tuple[int, int], device: torch.device, dtype: torch.dtype,
                   channels_last: bool, rect: bool, stride: int) -> tuple[Tensor, list[Any]]:
        imgs = [torch.from_numpy(it.image).to(device, non_blocking=True).permute(2, 0, 1) for it in items]
        if not rect:  # the fixed imgsz (e.g. of a fixed-size export): pad every image to it
            big = [it.shape for it in items if it.shape[0] > imgsz[0] or it.shape[1] > imgsz[1]]
            if big:
                raise ConfigError(f"rect=False pads each image to imgsz={list(imgsz)}, but an image is {big[0][1]}x"
                                  f"{big[0][0]}; pass a larger imgsz, or rect=True (each image at its own size)")
            x = pad_batch(imgs + [imgs[0].new_zeros(3, *imgsz)], stride)[:-1]  # the blank sets the size
        else:
            x = pad_batch(imgs, stride)
        x = x.to(dtype).div_(255.0)
        if channels_last:
            x = x.contiguous(memory_format=torch.channels_last)
        return x, [(int(t.shape[1]), int(t.shape[2]), int(x.shape[3])) for t in imgs]

    def outputs(self, twin: Any, raw: Any, *, items: list[Any], params: list[Any], opts: Any, decoded: bool,
                rerun: Any) -> list[Tensor]:
        outs = twin.postprocess(raw, conf=opts.conf, iou=opts.iou, classes=None, max_det=opts.max_det,
                                agnostic=False)
        crops = []
        for out, (h, w, width) in zip(outs, params, strict=True):
            k = int(out.shape[-1]) // width
            crops.append(out[:, :h * k, :w * k])
        shapes = [tuple(c.shape) for c in crops]
        flat = to_host([c.reshape(-1) for c in crops])
        return [f.view(s) for f, s in zip(flat, shapes, strict=True)]

    # ------------------------------------------------------------------ data
    def load_data(self, data: str) -> Any:
        from ...data.restore import load_restore_data

        return load_restore_data(str(data))

    def dataset(self, config: Any, files: list[Any], *, split: str, imgsz: int, augment: bool = False,
                train_cfg: Any = None) -> Any:
        """A :class:`~libreyolo.data.restore.RestoreDataset` of LQ patches of ``imgsz``."""
        from ...data.restore import RestoreDataset

        return RestoreDataset(files, imgsz=imgsz, scale=config.scale, augment=augment, prefix=f"{split}: ")

    def check_train_options(self, cfg: Any) -> None:
        for key, why in (("single_cls", "detection datasets"), ("rect", "detection datasets (rectangular batches)")):
            if getattr(cfg, key, False):
                raise ConfigError(f"{key}=True is for {why}; a restoration model trains on square random patches")
        if getattr(cfg, "multi_scale", 0):
            raise ConfigError("multi_scale resizes the input batch but not its HQ targets; a restoration model trains "
                              "at one patch size (multi_scale=0)")

    def train_defaults(self, family_imgsz: int, cfg: Any, explicit: set[str]) -> dict[str, Any]:
        """``imgsz`` (the LQ patch side) defaults to the family's and ``project`` to runs/restore."""
        return run_defaults(self.project, explicit, family_imgsz)

    # ------------------------------------------------------------------ validation
    def val_outputs(self, model: Any, raw: Any, *, conf: float, iou: float, max_det: int) -> list[Tensor]:
        return model.postprocess(raw, conf=conf, iou=iou, classes=None, max_det=max_det, agnostic=False)

    def scorer(self, names: dict[int, str]) -> Any:
        from .scoring import RestoreScorer

        return RestoreScorer(names)
