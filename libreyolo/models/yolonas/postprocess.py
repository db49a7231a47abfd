"""YOLO-NAS raw head outputs -> detections.

The head output has the dense DFL layout of the GELAN lineage (per level
Tensor[B, 4 * reg_max + nc, h, w], box-distribution logits first), so decoding is that lineage's
(:mod:`libreyolo.models._gelan.postprocess`), with ``reg_max`` = 17 bins read from the network:
anchor points at the cell centres, per side the expected distance of the softmax over bins
0..16, times the stride, around the point; sigmoid class scores, best class per anchor;
class-aware (or agnostic) NMS. Upstream's decode (super-gradients ``NDFLHeads`` +
``YoloNASDecodingModule``) computes the same boxes and scores; it keeps the top 1000 anchors
before NMS, which is :data:`libreyolo.models.yolonas.family.YOLONAS.DECODE_TOPK` here.
"""

from __future__ import annotations

from torch import Tensor, nn

from .._gelan import postprocess as _dense

MAX_CANDIDATES = _dense.MAX_CANDIDATES
NAME = "YOLO-NAS"

__all__ = ["MAX_CANDIDATES", "decode", "postprocess"]


def _check(raw: list[Tensor] | tuple[Tensor, ...], net: nn.Module) -> None:
    _dense.check_raw(list(raw), nc=int(net.nc), reg_max=int(net.reg_max), n_levels=len(net.strides), name=NAME)


def postprocess(raw: list[Tensor] | tuple[Tensor, ...], *, net: nn.Module, conf: float, iou: float,
                classes: list[int] | None, max_det: int, agnostic: bool,
                max_candidates: int = MAX_CANDIDATES) -> list[Tensor]:
    """Per image Tensor[n, 6] float32 (x1, y1, x2, y2 in network-input pixels, score, class id),
    by decreasing score, ``n <= max_det`` (:func:`libreyolo.models._gelan.postprocess.postprocess`).

    Example:
        >>> net = build_yolonas(size="s", nc=80).eval()  # doctest: +SKIP
        >>> dets = postprocess(net(x), net=net, conf=0.25, iou=0.7, classes=None,
        ...                    max_det=300, agnostic=False)  # doctest: +SKIP
    """
    _check(raw, net)
    return _dense.postprocess(raw, net=net, conf=conf, iou=iou, classes=classes, max_det=max_det,
                              agnostic=agnostic, max_candidates=max_candidates)


def decode(raw: list[Tensor] | tuple[Tensor, ...], *, net: nn.Module, k: int,
           anchors: tuple[Tensor, Tensor] | None = None) -> Tensor:
    """The capturable decode: Tensor[B, min(k, A), 6] float32 candidates by decreasing score
    (:func:`libreyolo.models._gelan.postprocess.decode`)."""
    _check(raw, net)
    return _dense.decode(raw, net=net, k=k, anchors=anchors)
