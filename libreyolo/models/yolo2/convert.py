"""Darknet ``yolov2.weights`` (the reference's COCO release, or any ``yolov2.cfg`` training with
another class count) onto our YOLOv2: the flat values are laid onto the layers in ``yolov2.cfg``
order (:mod:`libreyolo.models._darknet.convert`); the class count is solved from the value count."""

from __future__ import annotations

from collections.abc import Mapping

from torch import Tensor

from .._darknet.convert import FLAT_KEY, match_nc, unpack
from .nn import build_yolo2

SOURCES = ("darknet",)


def match(fw: object) -> tuple[str, int] | None:
    """``("b", nc)`` when the file's value count and variances fit the yolov2.cfg layout."""
    sd: Mapping[str, Tensor] = getattr(fw, "state_dict", {})
    if FLAT_KEY not in sd:
        return None
    nc = match_nc(sd[FLAT_KEY].numpy(), lambda n: build_yolo2(nc=n))
    return None if nc is None else ("b", nc)


def convert_state_dict(src: Mapping[str, Tensor], own: Mapping[str, Tensor], *, arch: str = "") -> dict[str, Tensor]:
    """Flat Darknet values -> our state dict (the layout of a net with ``own``'s class count)."""
    nc = int(own["head.m.0.bias"].numel()) // 5 - 5
    return unpack(src[FLAT_KEY].numpy(), build_yolo2(nc=nc), own)
