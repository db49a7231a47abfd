"""The module every exporter traces: the fused network, optionally followed by the family's
decode and a fixed-size NMS.

Heads (``ExportConfig.head``):

- ``"raw"``: the network's raw outputs, named by the family's ``OUTPUT_NAMES``;
- ``"decode"``: ``candidates`` Tensor[B, k, 6] float32 (x1, y1, x2, y2 input pixels, score,
  class id) by decreasing score: the family's own :meth:`~libreyolo.models._base.family.Family.decode`,
  the same function prediction captures in its CUDA graph;
- ``"nms"``: ``detections`` Tensor[B, max_det, 6]: the candidates over ``conf`` after NMS,
  by decreasing score, unused rows zero. Inside ONNX the suppression is the standard
  ``NonMaxSuppression`` operator; traced for TorchScript it is torchvision's ``nms``. Around it
  everything is fixed-size (a keep mask and a top-k), so a runtime needs no dynamic shapes.
"""

from __future__ import annotations

import copy
import json
import logging
from typing import TYPE_CHECKING, Any

import torch
from torch import Tensor, nn
from torchvision.ops import (
    batched_nms,  # imported before any trace: its first import must not be traced
)

from .._version import __version__
from ..errors import ExportError
from ..ops.letterbox import check_imgsz

if TYPE_CHECKING:
    from ..models._base.family import Family
    from .config import ExportConfig

logger = logging.getLogger(__name__)

METADATA_KEY = "libreyolo"


class ExportGraph(nn.Module):
    """``images`` Tensor[B, 3, H, W] (RGB, [0, 1], letterboxed) -> the outputs of ``head``.

    ``net`` is the (fused) copy being exported; ``family`` supplies the decode, which reads only
    the head's structure (classes, strides, DFL bins) and its cached anchor grids."""

    def __init__(self, net: nn.Module, family: Family, *, head: str, iou: float = 0.7, conf: float = 0.001,
                 max_det: int = 300, agnostic: bool = False) -> None:
        super().__init__()
        self.net = net
        self._family = [family]  # a list: keeps the family out of the module tree
        self.head = head
        self.iou, self.conf, self.max_det, self.agnostic = float(iou), float(conf), int(max_det), bool(agnostic)

    def forward(self, x: Tensor) -> Any:
        raw = self.net(x)
        if self.head == "raw":
            return tuple(raw) if isinstance(raw, (list, tuple)) else raw
        fam = self._family[0]
        cands = fam.decode(raw)  # (B, k, 6)
        if self.head == "decode":
            return cands
        if not fam.DECODE_NMS:  # one-to-one heads (DETRs): the best max_det candidates are the detections
            top = cands[:, : self.max_det]
            return top * (top[..., 4:5] > self.conf).to(top.dtype)
        return fixed_nms(cands, nc=fam.nc, iou=self.iou, conf=self.conf, max_det=self.max_det,
                         agnostic=self.agnostic)


def fixed_nms(cands: Tensor, *, nc: int, iou: float, conf: float, max_det: int, agnostic: bool) -> Tensor:
    """cands (Tensor[B, k, 6], sorted by decreasing score) -> Tensor[B, min(max_det, k), 6]: the
    rows over ``conf`` that survive greedy NMS at ``iou`` (per class unless ``agnostic``), by
    decreasing score; rows past the survivors are all zero. Shapes depend only on ``cands``'s."""
    boxes, score, cls = cands[..., :4], cands[..., 4], cands[..., 5]
    if agnostic:
        scores = score[:, None, :]  # (B, 1, k)
    else:
        onehot = cls.long()[..., None] == torch.arange(nc, device=cands.device)  # (B, k, C)
        scores = (onehot.to(score.dtype) * score[..., None]).transpose(1, 2)  # (B, C, k)
    k = cands.shape[1]
    if torch.onnx.is_in_onnx_export():
        sel = _OnnxNMS.apply(boxes, scores, int(k), float(iou), float(conf))
    else:
        sel = nms_indices(boxes, scores, iou=iou, score_threshold=conf)
    flat = sel[:, 0] * k + sel[:, 2]  # (M,) kept rows of (B * k)
    keep = torch.zeros_like(score).reshape(-1).scatter(0, flat, torch.ones_like(flat, dtype=score.dtype))
    kept = score * keep.reshape(score.shape)  # (B, k): 0 where suppressed
    top, order = kept.topk(min(int(max_det), int(k)), dim=1)
    out = cands.gather(1, order[..., None].expand(-1, -1, 6))
    return out * (top > 0)[..., None].to(out.dtype)


def nms_indices(boxes: Tensor, scores: Tensor, *, iou: float, score_threshold: float) -> Tensor:
    """What ONNX ``NonMaxSuppression`` returns, in PyTorch: boxes (Tensor[B, N, 4] xyxy), scores
    (Tensor[B, C, N]) -> selected (Tensor[M, 3] int64: batch, class, box index), greedy NMS per
    (batch, class) over the boxes scoring above ``score_threshold``."""
    c = scores.shape[1]
    idx = torch.nonzero(scores > score_threshold)  # (M0, 3) batch, class, box
    b, k, n = idx[:, 0], idx[:, 1], idx[:, 2]
    # float64: the class and image offsets of batched_nms (up to B * C * max coordinate) cost no
    # precision of the IoU
    keep = batched_nms(boxes[b, n].double(), scores[b, k, n].double(), b * c + k, iou)
    return idx[keep]


class _OnnxNMS(torch.autograd.Function):
    """ONNX ``NonMaxSuppression`` (opset >= 11): traced as that one standard node."""

    @staticmethod
    def forward(ctx: Any, boxes: Tensor, scores: Tensor, max_out: int, iou: float, score_threshold: float) -> Tensor:
        return nms_indices(boxes, scores, iou=iou, score_threshold=score_threshold)

    @staticmethod
    def symbolic(g: Any, boxes: Any, scores: Any, max_out: int, iou: float, score_threshold: float) -> Any:
        def const(v: Any, dtype: torch.dtype) -> Any:
            return g.op("Constant", value_t=torch.tensor([v], dtype=dtype))

        return g.op("NonMaxSuppression", boxes, scores, const(int(max_out), torch.int64),
                    const(float(iou), torch.float32), const(float(score_threshold), torch.float32),
                    center_point_box_i=0)


def output_names(model: Family, head: str) -> list[str]:
    if head == "decode":
        return ["candidates"]
    if head == "nms":
        return ["detections"]
    names = list(getattr(model, "OUTPUT_NAMES", ()) or ())
    if not names:
        raise ExportError(f"{model.FAMILY} declares no OUTPUT_NAMES, so it cannot be exported yet")
    return names


def build_export_graph(model: Family, cfg: ExportConfig) -> tuple[ExportGraph, Tensor, dict[str, Any]]:
    """(the module to trace, an example input, the metadata to store) for ``cfg``.

    Raises :class:`ExportError` when the family cannot do what ``cfg`` asks (no decode, half on
    CPU, dynamic axes it does not support)."""
    from ..models._base.family import select_device

    head = cfg.head
    h, w = check_imgsz(cfg.imgsz, stride=model.stride)
    device = select_device(cfg.device) if cfg.device is not None else torch.device("cpu")
    if cfg.half and device.type != "cuda":
        raise ExportError("half=True exports float16 and needs a CUDA device (device=0)")
    if head != "raw" and not getattr(model, "DECODE_TOPK", 0):
        raise ExportError(f"{model.FAMILY} has no decode to put inside the graph; export with "
                          "decode=False and nms=False (the raw outputs)")
    dyn_axes = tuple(getattr(model, "EXPORT_DYNAMIC_AXES", ()))
    if cfg.dynamic and not dyn_axes:
        raise ExportError(f"{model.FAMILY} does not support dynamic axes; export with dynamic=False")
    if cfg.dynamic and head != "raw" and set(dyn_axes) - {"batch"}:
        dyn_axes = tuple(a for a in dyn_axes if a == "batch")  # the anchor grids are fixed by H, W
        logger.info("export: with the decode inside only the batch axis is dynamic (imgsz %dx%d is fixed)", h, w)
    net = copy.deepcopy(model.net).to(device).eval()
    fuse = getattr(net, "fuse", None)
    if fuse is not None and not model.fused:
        fuse()
    x = torch.rand(cfg.batch, 3, h, w, device=device)
    if cfg.half:
        net, x = net.half(), x.half()
    graph = ExportGraph(net, model, head=head, iou=cfg.iou, conf=cfg.conf, max_det=cfg.max_det,
                        agnostic=cfg.agnostic_nms).eval()
    meta = {
        "family": model.FAMILY, "task": model.task, "size": model.size, "nc": model.nc,
        "names": {str(k): v for k, v in model.names.items()}, "imgsz": [h, w], "stride": model.stride,
        "batch": cfg.batch, "dynamic": cfg.dynamic, "dynamic_axes": list(dyn_axes) if cfg.dynamic else [],
        "half": cfg.half, "outputs": output_names(model, head), "head": head, "format": cfg.format,
        "version": __version__,
    }
    arch = getattr(model, "arch", None)
    if arch:  # architecture options beyond the size (a pose head's keypoint count, ...)
        meta["arch"] = dict(arch)
    if head != "raw":
        meta.update(topk=int(model.DECODE_TOPK), decode_nms=bool(model.DECODE_NMS))
    if head == "nms":
        meta.update(iou=cfg.iou, conf=cfg.conf, max_det=cfg.max_det, agnostic_nms=cfg.agnostic_nms)
    return graph, x, meta


def dumps(meta: dict[str, Any]) -> str:
    return json.dumps(meta)
