"""Darknet ``yolov4.weights`` / ``yolov4-tiny.weights`` (the reference's COCO releases, or any
training of those cfgs with another class count) onto our YOLOv4: the flat values are laid onto the layers in ``yolov4.cfg``
order (:mod:`libreyolo.models._darknet.convert`); the class count is solved from the value count."""

from __future__ import annotations

from collections.abc import Mapping

from torch import Tensor

from .._darknet.convert import FLAT_KEY, match_nc, unpack
from .nn import SIZES, build_yolo4

SOURCES = ("darknet",)


def match(fw: object) -> tuple[str, int] | None:
    """``(size, nc)`` when the file's value count and variances fit the layout of ``yolov4.cfg``
    (size ``b``) or ``yolov4-tiny.cfg`` (``tiny``)."""
    sd: Mapping[str, Tensor] = getattr(fw, "state_dict", {})
    if FLAT_KEY not in sd:
        return None
    for size in SIZES:
        nc = match_nc(sd[FLAT_KEY].numpy(), lambda n, s=size: build_yolo4(size=s, nc=n))
        if nc is not None:
            return size, nc
    return None


def convert_state_dict(src: Mapping[str, Tensor], own: Mapping[str, Tensor], *, arch: str = "") -> dict[str, Tensor]:
    """Flat Darknet values -> our state dict (the layout of a net with ``own``'s class count)."""
    nc = int(own["head.m.0.bias"].numel()) // 3 - 5
    size = "tiny" if "backbone.block1.conv.conv.weight" in own else "b"
    return unpack(src[FLAT_KEY].numpy(), build_yolo4(size=size, nc=nc), own)
