"""Promptable segmentation: points (foreground / background) and boxes in, one mask per prompt
out, with the model's predicted IoU as its score (SAM, MobileSAM).

Prediction letterboxes to the model's square input as detection does (``rect`` does not apply:
the image encoders are trained on one square size). The prompts of ``predict(points=, labels=,
boxes=, multimask_output=)`` are given in original image pixels; the task maps them onto the
network input and opens the family's prompt scope around the network step, so that the eager
prompt stage of the seam (captured image encoder, eager prompt encoder + mask decoder) answers
them; the image embedding is computed once per image for all its prompts. Without prompts the
model answers one foreground point at the image centre.

Prompt grammar (``P`` objects): ``boxes`` Tensor-like[P, 4] x1 y1 x2 y2 -> one prompt per box;
``points`` [N, 2] with ``labels`` [N] (1 foreground, 0 background; default all 1) -> one prompt
of N points, or ``points`` [P, N, 2] with ``labels`` [P, N] -> P prompts; points given with boxes
join every box (2-D) or their own box (3-D, same P). ``Results.masks``: Tensor[P*M, H, W] bool
(``M = 3`` with ``multimask_output``, else 1), ``Results.boxes``: each mask's bounding box with
the predicted IoU as confidence (class 0), ``Results.prompts``: the prompts in original pixels,
drawn by ``plot()``.

Data are segmentation datasets (YOLO polygon labels; the built-in demo ``data="shapes-seg"``):
each instance is a prompt (its box, and its box centre as a point) and its mask the target.
Validation (:mod:`.scoring`) reports mIoU over the prompts; training fine-tunes the mask decoder
(the image encoder frozen by the family's defaults) with focal + dice loss.
"""

from __future__ import annotations

from contextlib import AbstractContextManager, nullcontext
from typing import Any, ClassVar

import torch
from torch import Tensor

from ...errors import ConfigError
from ..segment import SegmentTask
from ..segment.masks import to_original


def parse_prompts(points: Any, labels: Any, boxes: Any) -> tuple[Tensor | None, Tensor | None, Tensor | None]:
    """User prompts -> (points Tensor[P, N, 2], labels Tensor[P, N], boxes Tensor[P, 4]) float32 / int64
    in the user's pixels, or ``None`` each; a malformed prompt raises :class:`ConfigError`.

    Example:
        >>> p, lab, b = parse_prompts([[10, 20], [30, 40]], [1, 0], None)
        >>> tuple(p.shape), lab.tolist(), b
        ((1, 2, 2), [[1, 0]], None)
    """
    pts = lab = bx = None
    try:
        if boxes is not None:
            bx = torch.as_tensor(boxes, dtype=torch.float32)
            bx = bx.view(1, 4) if bx.ndim == 1 else bx
        if points is not None:
            pts = torch.as_tensor(points, dtype=torch.float32)
            pts = pts.view(1, 1, 2) if pts.ndim == 1 else pts
            pts = pts[None] if pts.ndim == 2 else pts
            lab = (torch.ones(pts.shape[:2], dtype=torch.int64) if labels is None
                   else torch.as_tensor(labels, dtype=torch.int64).reshape(pts.shape[:2]))
    except (TypeError, ValueError, RuntimeError) as e:
        raise ConfigError(f"prompts must be numbers: points [[x, y], ...], labels [1, 0, ...], boxes "
                          f"[[x1, y1, x2, y2], ...]; {e}") from e
    if labels is not None and points is None:
        raise ConfigError("labels were given without points; pass points=[[x, y], ...] with labels=[1, 0, ...]")
    if bx is not None and (bx.ndim != 2 or bx.shape[1] != 4):
        raise ConfigError(f"boxes must be [[x1, y1, x2, y2], ...], got shape {tuple(bx.shape)}")
    if pts is not None and (pts.ndim != 3 or pts.shape[2] != 2):
        raise ConfigError(f"points must be [[x, y], ...] or [[[x, y], ...], ...], got shape {tuple(pts.shape)}")
    if lab is not None and not bool(((lab == 0) | (lab == 1)).all()):
        raise ConfigError("labels must be 1 (foreground) or 0 (background)")
    if pts is not None and bx is not None and pts.shape[0] != bx.shape[0]:
        if pts.shape[0] != 1:
            raise ConfigError(f"{pts.shape[0]} point groups for {bx.shape[0]} boxes: give one group per box "
                              "or one group for all")
        pts, lab = pts.expand(bx.shape[0], -1, -1), lab.expand(bx.shape[0], -1)
    return pts, lab, bx


class PromptTask(SegmentTask):
    name: ClassVar[str] = "prompt"
    results_field: ClassVar[str] = "masks"  # outputs() gives {"boxes", "masks", "prompts"} per image
    project: ClassVar[str] = "runs/prompt"
    val_losses: ClassVar[bool] = False
    plots: ClassVar[bool] = False
    metric_keys: ClassVar[tuple[str, ...]] = ()  # its mIoU_box / mIoU_point are in the val metrics only

    # ------------------------------------------------------------------ prediction
    def preprocess(self, items: list[Any], *, imgsz: tuple[int, int], device: torch.device, dtype: torch.dtype,
                   channels_last: bool, rect: bool, stride: int) -> tuple[Tensor, list[Any]]:
        return super().preprocess(items, imgsz=imgsz, device=device, dtype=dtype, channels_last=channels_last,
                                  rect=False, stride=stride)

    def network_scope(self, twin: Any, opts: Any, params: list[Any]) -> AbstractContextManager[Any]:
        """The family's prompt scope with the call's prompts mapped onto the network input."""
        from ...models._sam.prompt import Prompts

        pts, lab, bx = parse_prompts(getattr(opts, "points", None), getattr(opts, "labels", None),
                                     getattr(opts, "boxes", None))
        multimask = bool(getattr(opts, "multimask_output", False))
        if pts is None and bx is None and not multimask:
            return nullcontext()
        scope = getattr(twin, "prompting", None)
        if scope is None:  # an exported graph holds the network with the default prompt only
            raise ConfigError("this exported promptable model answers only the default prompt (the image centre); "
                              "load the PyTorch weights to predict with points / boxes")
        ratios = {(float(p.ratio), tuple(float(v) for v in p.pad)) for p in params}
        if len(ratios) > 1:
            raise ConfigError("prompts apply to every image of a batch: give images of one size per call (or batch=1)")
        ratio, pad = next(iter(ratios))
        offset = torch.tensor(pad, dtype=torch.float32)
        if pts is not None:
            pts = pts * ratio + offset
        if bx is not None:
            bx = bx * ratio + offset.repeat(2)
        if pts is None and bx is None:  # multimask alone: the default centre prompt, three masks
            h, w = (int(v) for v in params[0].out_shape)
            pts, lab = torch.tensor([[[w / 2.0, h / 2.0]]]), torch.ones(1, 1, dtype=torch.int64)
        return scope(Prompts(points=pts, labels=lab, boxes=bx, multimask=multimask))

    def outputs(self, twin: Any, raw: Any, *, items: list[Any], params: list[Any], opts: Any, decoded: bool,
                rerun: Any) -> list[dict[str, Any]]:
        outs = twin.postprocess(raw, conf=0.0, iou=0.0, classes=None, max_det=0, agnostic=False)
        pts, lab, bx = parse_prompts(getattr(opts, "points", None), getattr(opts, "labels", None),
                                     getattr(opts, "boxes", None))
        prompts = {"points": pts, "labels": lab, "boxes": bx}
        result = []
        for o, p, it in zip(outs, params, items, strict=True):
            masks = to_original(o["masks"].sigmoid(), input_hw=tuple(p.out_shape), ratio=p.ratio, pad=p.pad,
                                orig_hw=it.shape).cpu()
            boxes = torch.zeros(masks.shape[0], 6)
            for k, m in enumerate(masks):
                ys, xs = torch.nonzero(m, as_tuple=True)
                if len(xs):
                    boxes[k, :4] = torch.tensor([xs.min(), ys.min(), xs.max() + 1, ys.max() + 1], dtype=torch.float32)
            boxes[:, 4] = o["scores"].cpu().clamp(0, 1)
            result.append({"boxes": boxes, "masks": masks, "prompts": prompts})
        return result

    # ------------------------------------------------------------------ data
    def load_data(self, data: str) -> Any:
        """The segmentation dataset, class-agnostic: one class ``object`` (every instance is a prompt);
        the labels' own class count is kept as ``label_nc`` for reading them."""
        import dataclasses

        cfg = super().load_data(data)
        out = dataclasses.replace(cfg, nc=1, names={0: "object"})
        object.__setattr__(out, "label_nc", cfg.nc)
        return out

    def dataset(self, config: Any, files: list[Any], *, split: str, imgsz: int, augment: bool = False,
                train_cfg: Any = None) -> Any:
        import dataclasses

        labels = dataclasses.replace(config, nc=getattr(config, "label_nc", config.nc))
        return super().dataset(labels, files, split=split, imgsz=imgsz, augment=augment, train_cfg=train_cfg)

    def train_defaults(self, family_imgsz: int, cfg: Any, explicit: set[str]) -> dict[str, Any]:
        """``imgsz`` defaults to the family's (the image encoder's square input), ``project`` to runs/prompt."""
        changes: dict[str, Any] = {}
        if "imgsz" not in explicit:
            changes["imgsz"] = int(family_imgsz)
        if "project" not in explicit:
            changes["project"] = self.project
        return changes

    # ------------------------------------------------------------------ validation
    def val_outputs(self, model: Any, raw: Any, *, conf: float, iou: float, max_det: int) -> list[tuple[Any, Tensor]]:
        """Per image (the model, its embedding Tensor[1, C, h, w]): the scorer prompts each instance."""
        emb = raw[-1]
        return [(model, emb[b:b + 1]) for b in range(emb.shape[0])]

    def scorer(self, names: dict[int, str]) -> Any:
        from .scoring import PromptScorer

        return PromptScorer(names)
