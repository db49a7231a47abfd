"""Darknet ``yolov3.weights`` / ``yolov3-spp.weights`` / ``yolov3-tiny.weights`` (the reference's COCO releases, or any
training of those cfgs with another class count) onto our YOLOv3: the flat values are laid onto the layers in ``yolov3.cfg``
order (:mod:`libreyolo.models._darknet.convert`); the class count is solved from the value count."""

from __future__ import annotations

from collections.abc import Mapping

from torch import Tensor

from .._darknet.convert import FLAT_KEY, match_nc, unpack
from .nn import SIZES, build_yolo3

SOURCES = ("darknet",)


def match(fw: object) -> tuple[str, int] | None:
    """``(size, nc)`` when the file's value count and variances fit the layout of ``yolov3.cfg``
    (size ``b``), ``yolov3-spp.cfg`` (``spp``) or ``yolov3-tiny.cfg`` (``tiny``)."""
    sd: Mapping[str, Tensor] = getattr(fw, "state_dict", {})
    if FLAT_KEY not in sd:
        return None
    for size in SIZES:
        nc = match_nc(sd[FLAT_KEY].numpy(), lambda n, s=size: build_yolo3(size=s, nc=n))
        if nc is not None:
            return size, nc
    return None


def convert_state_dict(src: Mapping[str, Tensor], own: Mapping[str, Tensor], *, arch: str = "") -> dict[str, Tensor]:
    """Flat Darknet values -> our state dict (the layout of a net with ``own``'s class count)."""
    nc = int(own["head.m.0.bias"].numel()) // 3 - 5
    size = ("tiny" if "backbone.c16.0.conv.weight" in own  # the tiny backbone
            else "spp" if "set5.2.0.conv.weight" in own else "b")  # the SPP variant nests its second conv set
    return unpack(src[FLAT_KEY].numpy(), build_yolo3(size=size, nc=nc), own)
